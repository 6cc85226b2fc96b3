# SPDX-License-Identifier: Apache-2.0
"""FlashInfer MLA decode impls for non-causal (DSpark/DFlash) draft blocks
under decode context parallelism.

FlashInfer decode has no causal flag, so a non-causal query block is
flattened into one single-token row per query; with DCP the cute-dsl kernel
additionally needs the global causal bound of every row.
"""

from typing import Any

import torch
from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

from vllm.logger import init_logger
from vllm.v1.attention.backend import AttentionLayer
from vllm.v1.attention.backends.mla.flashinfer_mla import (
    FlashInferMLAImpl,
    FlashInferMLAMetadata,
    _get_workspace_buffer,
)

logger = init_logger(__name__)


def _decode_kernel(
    impl: FlashInferMLAImpl,
    q: torch.Tensor,
    kv_c_and_k_pe_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    return_lse: bool,
    **extra_kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    kernel_out = trtllm_batch_decode_with_kv_cache_mla(
        query=q,
        kv_cache=kv_c_and_k_pe_cache.unsqueeze(1),
        workspace_buffer=_get_workspace_buffer(return_lse),
        qk_nope_head_dim=impl.qk_nope_head_dim,
        kv_lora_rank=impl.kv_lora_rank,
        qk_rope_head_dim=impl.qk_rope_head_dim,
        block_tables=block_table,
        seq_lens=seq_lens,
        max_seq_len=max_seq_len,
        bmm1_scale=impl.bmm1_scale if impl.bmm1_scale is not None else impl.scale,
        bmm2_scale=impl.bmm2_scale if impl.bmm2_scale is not None else 1.0,
        return_lse=return_lse,
        **extra_kwargs,
    )
    if return_lse:
        o, lse = kernel_out
        lse = lse.view(-1, lse.shape[-1])
    else:
        o, lse = kernel_out, None
    return o.view(-1, o.shape[-2], o.shape[-1]), lse


def _as_single_query(q: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    if isinstance(q, tuple):
        q_nope, q_pe = q
        q = torch.cat([q_nope, q_pe], dim=-1)
    return q


class UniformBlockFlashInferMLAImpl(FlashInferMLAImpl):
    """Non-causal DCP decode for fixed-size DSpark blocks."""

    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa (non-causal DCP path)
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        decode = attn_metadata.decode
        assert decode is not None
        if attn_metadata.causal or self.dcp_world_size == 1:
            return super().forward_mqa(q, kv_c_and_k_pe_cache, attn_metadata, layer)
        q = _as_single_query(q)
        # DSpark blocks are uniform: every request carries the same query len.
        q_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
        block_table = decode.block_table.repeat_interleave(q_len, dim=0)
        seq_lens = decode.seq_lens.repeat_interleave(q_len)
        assert decode.dcp_tot_seq_lens is not None
        return _decode_kernel(
            self,
            q.unsqueeze(1),
            kv_c_and_k_pe_cache,
            block_table,
            seq_lens,
            attn_metadata.max_seq_len,
            self.need_to_return_lse_for_decode,
            enable_dcp=True,
            cp_world=self.dcp_world_size,
            cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
            backend="cute-dsl",
        )


class RepeatedBlockFlashInferMLAImpl(FlashInferMLAImpl):
    """Like UniformBlockFlashInferMLAImpl, expanding the global bound too."""

    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa (non-causal DCP path)
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        decode = attn_metadata.decode
        assert decode is not None
        if attn_metadata.causal or self.dcp_world_size == 1:
            return super().forward_mqa(q, kv_c_and_k_pe_cache, attn_metadata, layer)
        q = _as_single_query(q)
        q_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
        assert q_len * attn_metadata.num_decodes == attn_metadata.num_decode_tokens
        block_table = decode.block_table.repeat_interleave(q_len, dim=0)
        seq_lens = decode.seq_lens.repeat_interleave(q_len)
        assert decode.dcp_tot_seq_lens is not None
        causal_seqlens_kv_global = decode.dcp_tot_seq_lens.repeat_interleave(q_len)
        return _decode_kernel(
            self,
            q.unsqueeze(1),
            kv_c_and_k_pe_cache,
            block_table,
            seq_lens,
            attn_metadata.max_seq_len,
            self.need_to_return_lse_for_decode,
            enable_dcp=True,
            cp_world=self.dcp_world_size,
            cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=causal_seqlens_kv_global,
            backend="cute-dsl",
        )


class RaggedRowsFlashInferMLAImpl(FlashInferMLAImpl):
    """Non-causal DCP decode for ragged (adaptive) draft blocks."""

    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl._flattened_decode_metadata + forward_mqa
    # expect: SG202
    def _noncausal_dcp_decode(
        self,
        q: torch.Tensor,
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        decode = attn_metadata.decode
        assert decode is not None and decode.query_start_loc is not None
        num_rows = q.shape[0]
        cu = decode.query_start_loc
        rows = torch.arange(num_rows, device=cu.device, dtype=cu.dtype)
        row_req = torch.searchsorted(cu[1:], rows, right=True).clamp_(
            max=decode.block_table.shape[0] - 1
        )
        block_table = decode.block_table[row_req]
        seq_lens = decode.seq_lens[row_req]
        assert decode.dcp_tot_seq_lens is not None
        # The global bound only matters per request block.
        q_len = max(1, attn_metadata.num_decode_tokens // attn_metadata.num_decodes)
        causal_seqlens_kv_global = decode.dcp_tot_seq_lens.repeat_interleave(q_len)[
            :num_rows
        ]
        return _decode_kernel(
            self,
            q.unsqueeze(1),
            kv_c_and_k_pe_cache,
            block_table,
            seq_lens,
            attn_metadata.max_seq_len,
            self.need_to_return_lse_for_decode,
            enable_dcp=True,
            cp_world=self.dcp_world_size,
            cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=causal_seqlens_kv_global,
            backend="cute-dsl",
        )

    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if attn_metadata.causal or self.dcp_world_size == 1:
            return super().forward_mqa(q, kv_c_and_k_pe_cache, attn_metadata, layer)
        return self._noncausal_dcp_decode(
            _as_single_query(q), kv_c_and_k_pe_cache, attn_metadata
        )


class StaleGlobalFlashInferMLAImpl(FlashInferMLAImpl):
    """Reuses the impl's cached row expansion for the non-causal DCP path."""

    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa (non-causal DCP path)
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        decode = attn_metadata.decode
        assert decode is not None
        if attn_metadata.causal or self.dcp_world_size == 1:
            return super().forward_mqa(q, kv_c_and_k_pe_cache, attn_metadata, layer)
        q = _as_single_query(q).unsqueeze(1)
        block_table, seq_lens, _row_req = self._flattened_decode_metadata(
            attn_metadata, q.shape[0]
        )
        extra_kwargs: dict[str, Any] = {
            "enable_dcp": True,
            "cp_world": self.dcp_world_size,
            "cp_rank": self.dcp_rank,
            "backend": "cute-dsl",
        }
        assert decode.dcp_tot_seq_lens is not None
        extra_kwargs["causal_seqlens_kv_global"] = decode.dcp_tot_seq_lens
        return _decode_kernel(
            self,
            q,
            kv_c_and_k_pe_cache,
            block_table,
            seq_lens,
            attn_metadata.max_seq_len,
            self.need_to_return_lse_for_decode,
            **extra_kwargs,
        )


class RowReqFlashInferMLAImpl(FlashInferMLAImpl):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa (non-causal DCP path)
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        decode = attn_metadata.decode
        assert decode is not None
        if attn_metadata.causal or self.dcp_world_size == 1:
            return super().forward_mqa(q, kv_c_and_k_pe_cache, attn_metadata, layer)
        q = _as_single_query(q).unsqueeze(1)
        block_table, seq_lens, row_req = self._flattened_decode_metadata(
            attn_metadata, q.shape[0]
        )
        extra_kwargs: dict[str, Any] = {
            "enable_dcp": True,
            "cp_world": self.dcp_world_size,
            "cp_rank": self.dcp_rank,
            "backend": "cute-dsl",
        }
        assert decode.dcp_tot_seq_lens is not None
        extra_kwargs["causal_seqlens_kv_global"] = decode.dcp_tot_seq_lens[row_req]
        return _decode_kernel(
            self,
            q,
            kv_c_and_k_pe_cache,
            block_table,
            seq_lens,
            attn_metadata.max_seq_len,
            self.need_to_return_lse_for_decode,
            **extra_kwargs,
        )


class InterleavedRowsFlashInferMLAImpl(FlashInferMLAImpl):
    """Expands per-request tensors with views instead of copies."""

    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa (non-causal DCP path)
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        decode = attn_metadata.decode
        assert decode is not None
        if attn_metadata.causal or self.dcp_world_size == 1:
            return super().forward_mqa(q, kv_c_and_k_pe_cache, attn_metadata, layer)
        q = _as_single_query(q)
        num_decodes = attn_metadata.num_decodes
        num_rows = q.shape[0]
        q_len = num_rows // num_decodes
        # Row r belongs to request r // q_len.
        block_table = (
            decode.block_table.unsqueeze(1)
            .expand(-1, q_len, -1)
            .reshape(num_rows, decode.block_table.shape[-1])
        )
        seq_lens = decode.seq_lens.unsqueeze(1).expand(-1, q_len).reshape(num_rows)
        assert decode.dcp_tot_seq_lens is not None
        rows = torch.arange(num_rows, device=q.device)
        causal_seqlens_kv_global = decode.dcp_tot_seq_lens[rows % num_decodes]
        return _decode_kernel(
            self,
            q.unsqueeze(1),
            kv_c_and_k_pe_cache,
            block_table,
            seq_lens,
            attn_metadata.max_seq_len,
            self.need_to_return_lse_for_decode,
            enable_dcp=True,
            cp_world=self.dcp_world_size,
            cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=causal_seqlens_kv_global,
            backend="cute-dsl",
        )


class EarlyKwargsFlashInferMLAImpl(FlashInferMLAImpl):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa (extra_kwargs assembly)
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        decode = attn_metadata.decode
        assert decode is not None
        if self.dcp_world_size == 1:
            return super().forward_mqa(q, kv_c_and_k_pe_cache, attn_metadata, layer)
        dcp_kwargs = dict(
            enable_dcp=True,
            cp_world=self.dcp_world_size,
            cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
            backend="cute-dsl",
        )
        q = _as_single_query(q)
        block_table = decode.block_table
        seq_lens = decode.seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            block_table, seq_lens, _ = self._flattened_decode_metadata(
                attn_metadata, q.shape[0]
            )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        return _decode_kernel(
            self,
            q,
            kv_c_and_k_pe_cache,
            block_table,
            seq_lens,
            attn_metadata.max_seq_len,
            self.need_to_return_lse_for_decode,
            **dcp_kwargs,
        )


class LateKwargsFlashInferMLAImpl(FlashInferMLAImpl):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa (extra_kwargs assembly)
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        decode = attn_metadata.decode
        assert decode is not None
        if self.dcp_world_size == 1:
            return super().forward_mqa(q, kv_c_and_k_pe_cache, attn_metadata, layer)
        q = _as_single_query(q)
        block_table = decode.block_table
        seq_lens = decode.seq_lens
        causal_seqlens_kv_global = decode.dcp_tot_seq_lens
        assert causal_seqlens_kv_global is not None
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            block_table, seq_lens, row_req = self._flattened_decode_metadata(
                attn_metadata, q.shape[0]
            )
            causal_seqlens_kv_global = torch.index_select(
                causal_seqlens_kv_global, 0, row_req
            )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        dcp_kwargs = dict(
            enable_dcp=True,
            cp_world=self.dcp_world_size,
            cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=causal_seqlens_kv_global,
            backend="cute-dsl",
        )
        return _decode_kernel(
            self,
            q,
            kv_c_and_k_pe_cache,
            block_table,
            seq_lens,
            attn_metadata.max_seq_len,
            self.need_to_return_lse_for_decode,
            **dcp_kwargs,
        )


class CausalOnlyDCPFlashInferMLAImpl(FlashInferMLAImpl):
    """Causal multi-token decode under DCP (uniform reshape, no flattening)."""

    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa (uniform reshape + DCP)
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        decode = attn_metadata.decode
        assert decode is not None
        if not attn_metadata.causal or self.dcp_world_size == 1:
            return super().forward_mqa(q, kv_c_and_k_pe_cache, attn_metadata, layer)
        q = _as_single_query(q)
        # One row per request; the kernel tiles the q_len positions itself.
        q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        assert decode.dcp_tot_seq_lens is not None
        return _decode_kernel(
            self,
            q,
            kv_c_and_k_pe_cache,
            decode.block_table,
            decode.seq_lens,
            attn_metadata.max_seq_len,
            self.need_to_return_lse_for_decode,
            enable_dcp=True,
            cp_world=self.dcp_world_size,
            cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
            backend="cute-dsl",
        )
