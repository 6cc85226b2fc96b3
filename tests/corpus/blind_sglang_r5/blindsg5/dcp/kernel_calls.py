"""Alternative kernel-call styles for the DCP MLA decode.

``KernelCallStyles.forward_decode`` picks one implementation per deployment
(``SGLANG_FORK_DCP_DECODE_IMPL``); all of them launch flashinfer's
trtllm-gen MLA decode kernel for a single query token per request and return
the rank-local ``(out, lse)`` for the cross-rank merge.
"""

from __future__ import annotations

import functools
import os
from typing import Optional

import torch

from sglang.srt.distributed.parallel_state import get_dcp_rank, get_dcp_world_size
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from ._mla_common import build_decode_query, finish_rank_local, paged_kv_cache
from .lens import kernel_kv_lens, rank_local_kv_lens

if is_flashinfer_available():
    import flashinfer
    from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla


class KernelCallStyles(TRTLLMMLABackend):
    def __init__(self, model_runner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        impl = os.environ.get("SGLANG_FORK_DCP_DECODE_IMPL", "kwargs_local")
        self._decode_impl = getattr(self, f"_decode_dcp_{impl}")

    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = build_decode_query(
            self, q, q_rope, k, k_rope, layer, forward_batch, save_kv_cache
        ).unsqueeze(1)
        return self._decode_impl(query, paged_kv_cache(self, layer), layer, forward_batch)

    def _common_kernel_kwargs(self, query, kv_cache, layer, forward_batch):
        metadata = forward_batch.decode_trtllm_mla_metadata
        return dict(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )

    # expect: SG203
    def _decode_dcp_kwargs(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        kernel_kwargs = self._common_kernel_kwargs(query, kv_cache, layer, forward_batch)
        kernel_kwargs["seq_lens"] = forward_batch.seq_lens.to(torch.int32)
        if parallel.dcp_enabled:
            kernel_kwargs["return_lse"] = True
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            **kernel_kwargs
        )
        return finish_rank_local(
            raw_out,
            lse,
            kernel_kwargs["seq_lens"],
            self.q_indptr_decode[: bs + 1],
            1,
            layer,
        )

    # expect: clean
    def _decode_dcp_kwargs_local(
        self, query, kv_cache, layer, forward_batch: ForwardBatch
    ):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        kernel_kwargs = self._common_kernel_kwargs(query, kv_cache, layer, forward_batch)
        kernel_kwargs["seq_lens"] = (
            get_dcp_lens(forward_batch.seq_lens, parallel.dcp_size, parallel.dcp_rank)
            if parallel.dcp_enabled
            else forward_batch.seq_lens
        ).to(torch.int32)
        if parallel.dcp_enabled:
            kernel_kwargs["return_lse"] = True
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            **kernel_kwargs
        )
        return finish_rank_local(
            raw_out,
            lse,
            kernel_kwargs["seq_lens"],
            self.q_indptr_decode[: bs + 1],
            1,
            layer,
        )

    # expect: SG203
    def _decode_dcp_partial(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        decode = functools.partial(
            trtllm_batch_decode_with_kv_cache_mla,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )
        if get_dcp_world_size() > 1:
            decode = functools.partial(decode, return_lse=True)
        seq_lens = forward_batch.seq_lens[:bs].int()
        raw_out, lse = decode(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
        )
        return finish_rank_local(
            raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], 1, layer
        )

    # expect: clean
    def _decode_dcp_partial_bound(
        self, query, kv_cache, layer, forward_batch: ForwardBatch
    ):
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        local_lens = get_dcp_lens(
            forward_batch.seq_lens[:bs], get_dcp_world_size(), get_dcp_rank()
        ).int()
        decode = functools.partial(
            trtllm_batch_decode_with_kv_cache_mla,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            seq_lens=local_lens,
            return_lse=True,
        )
        raw_out, lse = decode(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            max_seq_len=metadata.max_seq_len_k,
        )
        return finish_rank_local(
            raw_out, lse, local_lens, self.q_indptr_decode[: bs + 1], 1, layer
        )

    # expect: SG203
    def _decode_dcp_helper(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        assert get_parallel().dcp_enabled
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        seq_lens = kernel_kv_lens(forward_batch, bs)
        raw_out, lse = trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
        )
        return finish_rank_local(
            raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], 1, layer
        )

    # expect: clean
    def _decode_dcp_helper_local(
        self, query, kv_cache, layer, forward_batch: ForwardBatch
    ):
        assert get_parallel().dcp_enabled
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        try:
            seq_lens = rank_local_kv_lens(forward_batch, bs)
        except ValueError as exc:
            raise NotImplementedError(
                "DCP MLA decode needs a positive interleave size"
            ) from exc
        raw_out, lse = trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
        )
        return finish_rank_local(
            raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], 1, layer
        )

    # expect: SG203
    def _decode_dcp_by_mode(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        parallel = get_parallel()
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        # A plain decode has one query token per request, so it reads the
        # batch lengths directly; spec modes use the hoisted metadata.
        seq_lens = (
            forward_batch.seq_lens[:bs]
            if forward_batch.forward_mode.is_decode()
            else metadata.seq_lens_k[:bs]
        )
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens.to(torch.int32),
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=parallel.dcp_enabled,
        )
        return finish_rank_local(
            raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], 1, layer
        )
