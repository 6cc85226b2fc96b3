"""SG202 cases: FlashInfer MLA non-causal decode with DCP.

When a non-causal query block is flattened into single-token rows, the
per-request ``block_table`` / ``seq_lens`` are expanded to one entry per row;
under DCP the global causal bound (``decode.dcp_tot_seq_lens``) must be
expanded with the same row-to-request map.
"""

from __future__ import annotations

from typing import Any

import torch
from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

from vllm.v1.attention.backend import AttentionLayer
from vllm.v1.attention.backends.mla.flashinfer_mla import (
    FlashInferMLAImpl,
    FlashInferMLAMetadata,
    _get_workspace_buffer,
)


class _DecodeCallMixin:
    """Shared kernel call (unlabelled)."""

    def _run_decode_kernel(
        self: Any,
        q: torch.Tensor,
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        block_table: torch.Tensor,
        seq_lens: torch.Tensor,
        extra_kwargs: dict[str, Any],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return_lse = self.need_to_return_lse_for_decode
        kernel_out = trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_c_and_k_pe_cache.unsqueeze(1),
            workspace_buffer=_get_workspace_buffer(return_lse),
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_table,
            seq_lens=seq_lens,
            max_seq_len=attn_metadata.max_seq_len,
            bmm1_scale=self.bmm1_scale,
            bmm2_scale=self.bmm2_scale,
            return_lse=return_lse,
            **extra_kwargs,
        )
        if return_lse:
            o, lse = kernel_out
            lse = lse.view(-1, lse.shape[-1])
        else:
            o, lse = kernel_out, None
        return o.view(-1, o.shape[-2], o.shape[-1]), lse


class UnexpandedBoundImpl(_DecodeCallMixin, FlashInferMLAImpl):
    # idiom: vllm-project/vllm vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
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
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        block_table = decode.block_table
        seq_lens = decode.seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            cu = decode.query_start_loc
            assert cu is not None
            rows = torch.arange(q.shape[0], device=cu.device, dtype=cu.dtype)
            row_req = torch.searchsorted(cu[1:], rows, right=True).clamp_(
                max=decode.block_table.shape[0] - 1
            )
            block_table = decode.block_table[row_req]
            seq_lens = decode.seq_lens[row_req]
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
                backend="cute-dsl",
            )
        return self._run_decode_kernel(
            q, kv_c_and_k_pe_cache, attn_metadata, block_table, seq_lens, extra_kwargs
        )


class SameRowsImpl(_DecodeCallMixin, FlashInferMLAImpl):
    # idiom: vllm-project/vllm vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
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
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        block_table = decode.block_table
        seq_lens = decode.seq_lens
        row_req: torch.Tensor | None = None
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            block_table, seq_lens, row_req = self._flattened_decode_metadata(
                attn_metadata, q.shape[0]
            )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            if row_req is not None:
                causal_seqlens_kv_global = causal_seqlens_kv_global[row_req]
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
                backend="cute-dsl",
            )
        return self._run_decode_kernel(
            q, kv_c_and_k_pe_cache, attn_metadata, block_table, seq_lens, extra_kwargs
        )


class UniformBoundImpl(_DecodeCallMixin, FlashInferMLAImpl):
    # idiom: vllm-project/vllm vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl._flattened_decode_metadata
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
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        q = q.unsqueeze(1)
        # Ragged rows: block_table / seq_lens follow query_start_loc.
        block_table, seq_lens, _ = self._flattened_decode_metadata(
            attn_metadata, q.shape[0]
        )
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            # ... but the bound is expanded as if every request had
            # max_query_len rows.
            causal_seqlens_kv_global = decode.dcp_tot_seq_lens.repeat_interleave(
                decode.max_query_len
            )
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
                backend="cute-dsl",
            )
        return self._run_decode_kernel(
            q, kv_c_and_k_pe_cache, attn_metadata, block_table, seq_lens, extra_kwargs
        )


class DictInputsImpl(_DecodeCallMixin, FlashInferMLAImpl):
    # idiom: vllm-project/vllm vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl._flattened_decode_metadata
    # expect: SG202
    def _expanded_decode_inputs(
        self, attn_metadata: FlashInferMLAMetadata, num_rows: int
    ) -> dict[str, torch.Tensor | None]:
        decode = attn_metadata.decode
        assert decode is not None
        cu = decode.query_start_loc
        assert cu is not None
        rows = torch.arange(num_rows, device=cu.device, dtype=cu.dtype)
        row_req = torch.searchsorted(cu[1:], rows, right=True).clamp_(
            max=decode.block_table.shape[0] - 1
        )
        return {
            "block_table": decode.block_table[row_req],
            "seq_lens": decode.seq_lens[row_req],
            "causal_seqlens_kv_global": decode.dcp_tot_seq_lens,
        }

    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        q = q.unsqueeze(1)
        inputs = self._expanded_decode_inputs(attn_metadata, q.shape[0])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=inputs["causal_seqlens_kv_global"],
                backend="cute-dsl",
            )
        return self._run_decode_kernel(
            q,
            kv_c_and_k_pe_cache,
            attn_metadata,
            inputs["block_table"],
            inputs["seq_lens"],
            extra_kwargs,
        )


class DictInputsOkImpl(_DecodeCallMixin, FlashInferMLAImpl):
    # idiom: vllm-project/vllm vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl._flattened_decode_metadata
    # expect: clean
    def _expanded_decode_inputs(
        self, attn_metadata: FlashInferMLAMetadata, num_rows: int
    ) -> dict[str, torch.Tensor | None]:
        decode = attn_metadata.decode
        assert decode is not None
        cu = decode.query_start_loc
        assert cu is not None
        rows = torch.arange(num_rows, device=cu.device, dtype=cu.dtype)
        row_req = torch.searchsorted(cu[1:], rows, right=True).clamp_(
            max=decode.block_table.shape[0] - 1
        )
        bound = decode.dcp_tot_seq_lens
        return {
            "block_table": decode.block_table[row_req],
            "seq_lens": decode.seq_lens[row_req],
            "causal_seqlens_kv_global": None if bound is None else bound[row_req],
        }

    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        q = q.unsqueeze(1)
        inputs = self._expanded_decode_inputs(attn_metadata, q.shape[0])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=inputs["causal_seqlens_kv_global"],
                backend="cute-dsl",
            )
        return self._run_decode_kernel(
            q,
            kv_c_and_k_pe_cache,
            attn_metadata,
            inputs["block_table"],
            inputs["seq_lens"],
            extra_kwargs,
        )


class StoredRowsImpl(_DecodeCallMixin, FlashInferMLAImpl):
    """The row map cached on the decode metadata by _flattened_decode_metadata."""

    # idiom: vllm-project/vllm vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl._flattened_decode_metadata
    # expect: SG202
    def _dcp_bound_for_rows(
        self, attn_metadata: FlashInferMLAMetadata, num_rows: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        decode = attn_metadata.decode
        assert decode is not None
        block_table, seq_lens, _ = self._flattened_decode_metadata(
            attn_metadata, num_rows
        )
        # Row -> request by integer division: a uniform-batch geometry that
        # differs from the searchsorted map behind block_table / seq_lens.
        rows = torch.arange(num_rows, device=decode.seq_lens.device)
        uniform_row_req = rows // decode.max_query_len
        bound = decode.dcp_tot_seq_lens[uniform_row_req]
        return block_table, seq_lens, bound

    # idiom: vllm-project/vllm vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl._flattened_decode_metadata
    # expect: clean
    def _dcp_bound_for_rows_ok(
        self, attn_metadata: FlashInferMLAMetadata, num_rows: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        decode = attn_metadata.decode
        assert decode is not None
        block_table, seq_lens, _ = self._flattened_decode_metadata(
            attn_metadata, num_rows
        )
        # The same map _flattened_decode_metadata cached on the metadata.
        row_req = decode.flattened_row_req
        assert row_req is not None
        bound = decode.dcp_tot_seq_lens[row_req]
        return block_table, seq_lens, bound


class TokenCountRowsImpl(_DecodeCallMixin, FlashInferMLAImpl):
    # idiom: vllm-project/vllm vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
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
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        q = q.unsqueeze(1)
        cu = decode.query_start_loc
        assert cu is not None
        max_req = decode.block_table.shape[0] - 1
        # One row per query row of q (including graph-padded rows) ...
        q_rows = torch.arange(q.shape[0], device=cu.device, dtype=cu.dtype)
        row_req = torch.searchsorted(cu[1:], q_rows, right=True).clamp_(max=max_req)
        block_table = decode.block_table[row_req]
        seq_lens = decode.seq_lens[row_req]
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            # ... but the bound only for the real decode tokens.
            tok_rows = torch.arange(
                attn_metadata.num_decode_tokens, device=cu.device, dtype=cu.dtype
            )
            tok_req = torch.searchsorted(cu[1:], tok_rows, right=True).clamp_(
                max=max_req
            )
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=decode.dcp_tot_seq_lens[tok_req],
                backend="cute-dsl",
            )
        return self._run_decode_kernel(
            q, kv_c_and_k_pe_cache, attn_metadata, block_table, seq_lens, extra_kwargs
        )


class CausalOnlyImpl(_DecodeCallMixin, FlashInferMLAImpl):
    # idiom: vllm-project/vllm vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
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
        # This drafter only runs causal decode: nothing is flattened, so the
        # per-request bound lines up with the per-request block table.
        assert attn_metadata.causal
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
                backend="cute-dsl",
            )
        return self._run_decode_kernel(
            q,
            kv_c_and_k_pe_cache,
            attn_metadata,
            decode.block_table,
            decode.seq_lens,
            extra_kwargs,
        )
