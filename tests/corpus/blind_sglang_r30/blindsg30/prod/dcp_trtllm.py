"""Production patches to the TRTLLM MLA backend for decode context parallelism.

The decode implementation is picked by name (``STARTUP_MLA_DECODE_IMPL``) from
a per-instance dispatch table, so several variants can be A/B'd in production.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import TYPE_CHECKING, Dict, Optional, Tuple

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg30.prod.mla_kernels import MLAQueryMixin
from blindsg30.utils import dcp_lens as dl

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.model_runner import ModelRunner


class StartupTrtllmMLABackend(MLAQueryMixin, TRTLLMMLABackend):
    def __init__(self, model_runner: "ModelRunner", *args, decode_impl: str = "local", **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.decode_impl = os.environ.get("STARTUP_MLA_DECODE_IMPL", decode_impl)
        self._meta_by_bs: Dict[int, SimpleNamespace] = {}
        self._local_meta_by_bs: Dict[int, SimpleNamespace] = {}
        self._lens: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
        self._decode_kwargs: dict = {}
        self._local_decode_kwargs: dict = {}
        self._decode_table = {
            "fast": self.forward_decode_fast,
            "local": self.forward_decode_local,
            "swapped": self.forward_decode_swapped,
            "tuple": self.forward_decode_tuple,
            "cached": self.forward_decode_cached_meta,
            "cached_local": self.forward_decode_cached_local,
            "kwargs": self.forward_decode_via_kwargs,
            "kwargs_local": self.forward_decode_via_local_kwargs,
        }

    # ---------------------------------------------------------------- plan
    def _build_decode_meta(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        meta = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        self._meta_by_bs[bs] = SimpleNamespace(
            block_kv_indices=meta.block_kv_indices,
            max_seq_len_k=meta.max_seq_len_k,
            seq_lens_k=forward_batch.seq_lens[:bs].to(torch.int32),
        )

    def _build_decode_meta_local(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        meta = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        self._local_meta_by_bs[bs] = SimpleNamespace(
            block_kv_indices=meta.block_kv_indices,
            max_seq_len_k=meta.max_seq_len_k,
            seq_lens_k=self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs]),
        )

    def _prepare_decode_kwargs(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        meta = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        self._decode_kwargs = dict(
            block_tables=meta.block_kv_indices,
            seq_lens=forward_batch.seq_lens[:bs],
            max_seq_len=meta.max_seq_len_k,
        )
        self._local_decode_kwargs = dict(
            block_tables=meta.block_kv_indices,
            seq_lens=dl.local_lens(forward_batch.seq_lens[:bs]),
            max_seq_len=meta.max_seq_len_k,
        )

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata; super plan, then caches (global, local) lens tuple and per-bs dicts
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if not forward_batch.forward_mode.is_decode_or_idle():
            return
        bs = forward_batch.batch_size
        self._lens = dl.split_lens(forward_batch.seq_lens[:bs])
        self._build_decode_meta(forward_batch)
        self._build_decode_meta_local(forward_batch)
        self._prepare_decode_kwargs(forward_batch)

    # --------------------------------------------------------------- decode
    def forward_decode(
        self,
        q,
        k,
        v,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        if (
            not get_parallel().dcp_enabled
            or cos_sin_cache is not None
            or torch.cuda.is_current_stream_capturing()
        ):
            # The per-step caches below are eager-only; graphs keep the stock path.
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        impl = self._decode_table[self.decode_impl]
        return impl(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)

    # idiom: layers/attention/trtllm_mla_backend.py _forward_decode_dcp; hands forward_batch.seq_lens to _run_decode_kernel under DCP
    # expect: SG203
    def forward_decode_fast(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=meta.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=meta.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, seq_lens, layer)

    # idiom: layers/attention/trtllm_mla_backend.py _forward_decode_dcp; lens localized by the inherited _get_dcp_local_seq_lens
    # expect: clean
    def forward_decode_local(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        bs = forward_batch.batch_size
        local_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=meta.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=meta.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, local_lens, layer)

    # idiom: layers/attention/trtllm_mla_backend.py _forward_decode_dcp; self._lens is (global, local) but is unpacked as (local, _)
    # expect: SG203
    def forward_decode_swapped(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        local_lens, _ = self._lens
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=meta.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=meta.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, local_lens, layer)

    # idiom: layers/attention/trtllm_mla_backend.py _forward_decode_dcp; self._lens (global, local) unpacked in its stored order
    # expect: clean
    def forward_decode_tuple(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        _, local_lens = self._lens
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=meta.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=meta.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, local_lens, layer)

    # idiom: layers/attention/trtllm_mla_backend.py decode_cuda_graph_metadata[bs]; self._meta_by_bs[bs].seq_lens_k was filled from forward_batch.seq_lens
    # expect: SG203
    def forward_decode_cached_meta(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = self._meta_by_bs[forward_batch.batch_size]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=meta.block_kv_indices,
            seq_lens=meta.seq_lens_k,
            max_seq_len=meta.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, meta.seq_lens_k, layer)

    # idiom: layers/attention/trtllm_mla_backend.py decode_cuda_graph_metadata[bs]; self._local_meta_by_bs[bs] holds rank-local lens
    # expect: clean
    def forward_decode_cached_local(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = self._local_meta_by_bs[forward_batch.batch_size]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=meta.block_kv_indices,
            seq_lens=meta.seq_lens_k,
            max_seq_len=meta.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, meta.seq_lens_k, layer)

    # idiom: layers/attention/trtllm_mla_backend.py _run_decode_kernel call; **self._decode_kwargs built in _prepare_decode_kwargs from forward_batch.seq_lens
    # expect: SG203
    def forward_decode_via_kwargs(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        raw_out, lse = self._run_decode_kernel(
            query, self._kv_cache(layer), layer=layer, return_lse=True, **self._decode_kwargs
        )
        return self._finish_dcp(raw_out, lse, self._decode_kwargs["seq_lens"], layer)

    # idiom: layers/attention/trtllm_mla_backend.py _run_decode_kernel call; **self._local_decode_kwargs localized through dcp_lens.local_lens
    # expect: clean
    def forward_decode_via_local_kwargs(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        kw = self._local_decode_kwargs
        raw_out, lse = self._run_decode_kernel(
            query, self._kv_cache(layer), layer=layer, return_lse=True, **kw
        )
        return self._finish_dcp(raw_out, lse, kw["seq_lens"], layer)


class LenientTrtllmMLABackend(TRTLLMMLABackend):
    """Lets speculative verify run on trtllm-gen under DCP."""

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel override; under DCP launches any q_len and drops causal_seqs
    # expect: SG203
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        if not get_parallel().dcp_enabled:
            return super()._run_decode_kernel(
                query, kv_cache, block_tables, seq_lens, max_seq_len, layer,
                causal_seqs=causal_seqs, cp_world=cp_world, cp_rank=cp_rank,
                return_lse=return_lse,
            )
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens.to(torch.int32),
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
        )


class StrictTrtllmMLABackend(TRTLLMMLABackend):
    """Same launch path, refusing what the kernel cannot do under DCP."""

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel override; refuses q_len>1 / causal_seqs under DCP
    # expect: clean
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        q_len = query.shape[1] if query.dim() == 4 else 1
        if get_parallel().dcp_enabled:
            if q_len > 1 or causal_seqs is not None or not return_lse:
                raise NotImplementedError(
                    "only single-token MLA decode with LSE runs on trtllm-gen under "
                    "DCP; multi-token queries need a global causal bound (cutedsl_mla)"
                )
            return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                query=query,
                kv_cache=kv_cache,
                workspace_buffer=self.workspace_buffer,
                qk_nope_head_dim=self.qk_nope_head_dim,
                kv_lora_rank=self.kv_lora_rank,
                qk_rope_head_dim=self.qk_rope_head_dim,
                block_tables=block_tables,
                seq_lens=seq_lens.to(torch.int32),
                max_seq_len=max_seq_len,
                bmm1_scale=self._compute_decode_bmm1_scale(layer),
                return_lse=True,
            )
        return super()._run_decode_kernel(
            query, kv_cache, block_tables, seq_lens, max_seq_len, layer,
            causal_seqs=causal_seqs, cp_world=cp_world, cp_rank=cp_rank,
            return_lse=return_lse,
        )
