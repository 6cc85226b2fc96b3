"""Hybrid prefill/decode backend that drives the trtllm-family decode kernel
directly under DCP (skipping the decode backend's fp8 query plumbing)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional, Tuple

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.hybrid_attn_backend import HybridAttnBackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention

logger = logging.getLogger(__name__)


class DcpHybridAttnBackend(HybridAttnBackend):
    def _mla_query_and_cache(
        self,
        backend: TRTLLMMLABackend,
        q: torch.Tensor,
        k: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool,
        q_rope: torch.Tensor,
        k_rope: Optional[torch.Tensor],
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        if save_kv_cache:
            backend.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        q_rope = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
        query = concat_mla_absorb_q_general(q_nope, q_rope)
        k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, backend.page_size).unsqueeze(1)
        return query, kv_cache

    def _launch_rank_local(
        self,
        backend: TRTLLMMLABackend,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        kv_lens: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
        cum_seq_lens_q: Optional[torch.Tensor] = None,
        max_q_len: Optional[int] = None,
    ):
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=backend.workspace_buffer,
            qk_nope_head_dim=backend.qk_nope_head_dim,
            kv_lora_rank=backend.kv_lora_rank,
            qk_rope_head_dim=backend.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=kv_lens.to(torch.int32),
            max_seq_len=max_seq_len,
            bmm1_scale=backend._compute_decode_bmm1_scale(layer),
            return_lse=True,
            cum_seq_lens_q=cum_seq_lens_q,
            max_q_len=max_q_len,
        )

    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        **kwargs,
    ):
        backend = self.decode_backend
        q_rope = kwargs.get("q_rope")
        if (
            not get_parallel().dcp_enabled
            or not isinstance(backend, TRTLLMMLABackend)
            or q_rope is None
            or backend.data_type == torch.float8_e4m3fn
        ):
            return backend.forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, **kwargs
            )
        query, kv_cache = self._mla_query_and_cache(
            backend, q, k, layer, forward_batch, save_kv_cache, q_rope, kwargs.get("k_rope")
        )
        metadata = backend.forward_decode_metadata
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        raw_out, lse = backend._run_decode_kernel(
            query=query.unsqueeze(1),
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        return output.flatten(1), lse

    # expect: SG203
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        **kwargs,
    ):
        backend = self.decode_backend
        parallel = get_parallel()
        q_rope = kwargs.get("q_rope")
        if not (
            parallel.dcp_enabled
            and forward_batch.forward_mode.is_draft_extend_v2()
            and isinstance(backend, TRTLLMMLABackend)
            and q_rope is not None
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, **kwargs
            )
        query, kv_cache = self._mla_query_and_cache(
            backend, q, k, layer, forward_batch, save_kv_cache, q_rope, kwargs.get("k_rope")
        )
        metadata = backend.forward_decode_metadata
        bs = forward_batch.batch_size
        cu_seqlens_q = torch.nn.functional.pad(
            torch.cumsum(forward_batch.extend_seq_lens, dim=0, dtype=torch.int32),
            (1, 0),
        )
        max_q = max(forward_batch.extend_seq_lens_cpu)
        raw_out, lse = self._launch_rank_local(
            backend,
            query,
            kv_cache,
            metadata.block_kv_indices,
            metadata.seq_lens_k[:bs],
            metadata.max_seq_len_k + max_q,
            layer,
            cum_seq_lens_q=cu_seqlens_q,
            max_q_len=max_q,
        )
        return raw_out.flatten(1), lse


class DcpHybridAttnBackendV2(DcpHybridAttnBackend):
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        **kwargs,
    ):
        backend = self.decode_backend
        q_rope = kwargs.get("q_rope")
        if (
            not get_parallel().dcp_enabled
            or not isinstance(backend, TRTLLMMLABackend)
            or q_rope is None
            or backend.data_type == torch.float8_e4m3fn
        ):
            return backend.forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, **kwargs
            )
        query, kv_cache = self._mla_query_and_cache(
            backend, q, k, layer, forward_batch, save_kv_cache, q_rope, kwargs.get("k_rope")
        )
        metadata = backend.forward_decode_metadata
        bs = forward_batch.batch_size
        seq_lens = backend._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = backend._run_decode_kernel(
            query=query.unsqueeze(1),
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, seq_lens, backend.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

    # expect: clean
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        **kwargs,
    ):
        backend = self.decode_backend
        parallel = get_parallel()
        q_rope = kwargs.get("q_rope")
        if not (
            parallel.dcp_enabled
            and forward_batch.forward_mode.is_draft_extend_v2()
            and isinstance(backend, TRTLLMMLABackend)
            and q_rope is not None
        ):
            return HybridAttnBackend.forward_extend(
                self, q, k, v, layer, forward_batch, save_kv_cache, **kwargs
            )
        if not isinstance(backend, CuteDslMLABackend):
            raise NotImplementedError(
                "DCP draft extend needs the cute-dsl decode kernel (global causal bound)"
            )
        query, kv_cache = self._mla_query_and_cache(
            backend, q, k, layer, forward_batch, save_kv_cache, q_rope, kwargs.get("k_rope")
        )
        metadata = backend.forward_decode_metadata
        bs = forward_batch.batch_size
        max_q = max(forward_batch.extend_seq_lens_cpu)
        query = query.view(bs, max_q, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = backend._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k + max_q,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return raw_out.flatten(1), lse
