# SPDX-License-Identifier: Apache-2.0
"""FlashInfer MLA decode impls carried by the fork for DSpark drafts + DCP.

FlashInfer's decode kernel has no causal flag, so a non-causal query block is
flattened into one decode row per query token (``block_tables``/``seq_lens``
repeated per row). Under DCP the native CP kernel also takes the global causal
bound ``causal_seqlens_kv_global``.
"""

import os
from dataclasses import dataclass, field
from typing import Any

import torch
from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

from vllm.distributed.parallel_state import get_dcp_group

from vllm.v1.attention.backend import AttentionLayer
from vllm.v1.attention.backends.mla.flashinfer_mla import (
    FlashInferMLADecodeMetadata,
    FlashInferMLAMetadata,
    FlashInferMLAMetadataBuilder,
    _get_workspace_buffer,
)

from ._mla_rows import FlashInferMLADecodeBase, decode_row_map, expand_uniform


# ---------------------------------------------------------------------------
# Row geometry that disagrees with the global causal bound.
# ---------------------------------------------------------------------------
class DSparkDcpMLAImpl(FlashInferMLADecodeBase):
    """vLLM 0.28-era flattening plus a separately written DCP kwargs helper."""

    def _expand_rows(
        self,
        attn_metadata: FlashInferMLAMetadata,
        block_table: torch.Tensor,
        seq_lens: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        query_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
        if query_len > 1:
            return (
                block_table.repeat_interleave(query_len, dim=0),
                seq_lens.repeat_interleave(query_len),
            )
        return block_table, seq_lens

    def _dcp_kwargs(self, attn_metadata: FlashInferMLAMetadata) -> dict[str, Any]:
        if self.dcp_world_size == 1:
            return {}
        bound = attn_metadata.decode.dcp_tot_seq_lens
        assert bound is not None
        return dict(
            enable_dcp=True,
            cp_world=self.dcp_world_size,
            cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=bound,
            backend="cute-dsl",
        )

    # idiom: FlashInferMLAImpl.forward_mqa as of vLLM 0.28 (repeat_interleave of block_table/seq_lens for non-causal blocks) with the native-DCP kwargs from a separate helper method that keeps dcp_tot_seq_lens per request, splatted with **
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = self._prepare_q(q)
        block_table = attn_metadata.decode.block_table
        seq_lens = attn_metadata.decode.seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            block_table, seq_lens = self._expand_rows(
                attn_metadata, block_table, seq_lens
            )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        self._ensure_scales(layer)
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
            **self._dcp_kwargs(attn_metadata),
        )
        return self._finish(kernel_out, return_lse)


class MergedRowMapMLAImpl(FlashInferMLADecodeBase):
    # idiom: a merge of vLLM 0.31's searchsorted row map (block_table/seq_lens indexed by row_req) with vLLM 0.29's repeat_interleave(query_len) of causal_seqlens_kv_global: two different row maps
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = self._prepare_q(q)
        decode = attn_metadata.decode
        block_table, seq_lens = decode.block_table, decode.seq_lens
        multi_token = (
            decode.max_query_len > 1
            or attn_metadata.num_decode_tokens > attn_metadata.num_decodes
        )
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if multi_token:
                row_req = decode_row_map(decode, q.shape[0])
                block_table = block_table[row_req]
                seq_lens = seq_lens[row_req]
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            bound = decode.dcp_tot_seq_lens
            assert bound is not None
            if not attn_metadata.causal and multi_token:
                query_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
                bound = bound.repeat_interleave(query_len)
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=bound,
                backend="cute-dsl",
            )
        self._ensure_scales(layer)
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
        return self._finish(kernel_out, return_lse)


class PromisedBoundMLAImpl(FlashInferMLADecodeBase):
    # idiom: FlashInferMLAImpl.forward_mqa (0.33) flattening by row_req under multi_token_decode, but indexing the global bound by row_req only for uniform batches: a ragged (adaptive-verification) batch keeps it per request
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = self._prepare_q(q)
        decode = attn_metadata.decode
        block_table, seq_lens = decode.block_table, decode.seq_lens
        row_req: torch.Tensor | None = None
        multi_token_decode = (
            decode.max_query_len > 1
            or attn_metadata.num_decode_tokens > attn_metadata.num_decodes
        )
        uniform = (
            attn_metadata.num_decode_tokens
            == decode.max_query_len * attn_metadata.num_decodes
        )
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if multi_token_decode:
                block_table, seq_lens, row_req = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            # Uniform DSpark blocks: one global bound per flattened row.
            if uniform and row_req is not None:
                causal_seqlens_kv_global = causal_seqlens_kv_global[row_req]
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
                backend="cute-dsl",
            )
        self._ensure_scales(layer)
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
        return self._finish(kernel_out, return_lse)


@dataclass
class PrecomputedDcpDecodeMetadata(FlashInferMLADecodeMetadata):
    # Launch kwargs prepared once per step by the builder, reused by all layers.
    dcp_launch_kwargs: dict[str, Any] = field(default_factory=dict)


class PrecomputedDcpMLAMetadataBuilder(FlashInferMLAMetadataBuilder):
    def _build_decode(
        self,
        block_table_tensor: torch.Tensor,
        seq_lens_device: torch.Tensor,
        max_seq_len: int,
        query_start_loc_cpu: torch.Tensor,
        query_start_loc_device: torch.Tensor,
        num_decode_tokens: int,
        max_query_len: int,
        dcp_tot_seq_lens_device: torch.Tensor | None,
    ) -> PrecomputedDcpDecodeMetadata:
        dcp_kwargs: dict[str, Any] = {}
        if dcp_tot_seq_lens_device is not None:
            dcp_kwargs = dict(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=get_dcp_group().rank_in_group,
                causal_seqlens_kv_global=dcp_tot_seq_lens_device,
                backend="cute-dsl",
            )
        return PrecomputedDcpDecodeMetadata(
            block_table=block_table_tensor,
            seq_lens=seq_lens_device,
            dcp_tot_seq_lens=dcp_tot_seq_lens_device,
            query_start_loc=query_start_loc_device,
            max_query_len=max_query_len,
            dcp_launch_kwargs=dcp_kwargs,
        )


class PrecomputedDcpMLAImpl(FlashInferMLADecodeBase):
    # idiom: metadata builder _build_decode precomputing the native-DCP launch kwargs (per-request dcp_tot_seq_lens) on the decode metadata; the impl flattens block_table/seq_lens by the searchsorted row map and splats the stored dict
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        decode = attn_metadata.decode
        assert isinstance(decode, PrecomputedDcpDecodeMetadata)
        q = self._prepare_q(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if attn_metadata.num_decode_tokens > attn_metadata.num_decodes:
                rows = decode_row_map(decode, q.shape[0])
                block_table, seq_lens = block_table[rows], seq_lens[rows]
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        self._ensure_scales(layer)
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
            **decode.dcp_launch_kwargs,
        )
        return self._finish(kernel_out, return_lse)


class FlagBoundMLAImpl(FlashInferMLADecodeBase):
    # Off by default while the per-row bound is validated on B300.
    _expand_global_bound = os.environ.get("VLLM_FORK_EXPAND_DCP_BOUND", "0") == "1"

    # idiom: FlashInferMLAImpl.forward_mqa (0.33 row_req flattening) where the global bound is indexed by row_req only under an env-var flag, written as a walrus inside a conditional expression
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = self._prepare_q(q)
        decode = attn_metadata.decode
        block_table, seq_lens = decode.block_table, decode.seq_lens
        row_req: torch.Tensor | None = None
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if attn_metadata.num_decode_tokens > attn_metadata.num_decodes:
                block_table, seq_lens, row_req = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=(
                    g[row_req]
                    if (g := decode.dcp_tot_seq_lens) is not None
                    and row_req is not None
                    and self._expand_global_bound
                    else g
                ),
                backend="cute-dsl",
            )
        self._ensure_scales(layer)
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
        return self._finish(kernel_out, return_lse)


class ChunkedRowsMLAImpl(FlashInferMLADecodeBase):
    # Rows per launch; bounds the cute-dsl workspace for very wide DSpark blocks.
    max_rows_per_launch: int = 4096

    # idiom: FlashInferMLAImpl.forward_mqa split into a loop of launches over row chunks: flattened block_table/seq_lens sliced by row range, the per-request dcp_tot_seq_lens sliced by the same row range
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        assert not attn_metadata.causal, "chunked launches are for DSpark blocks"
        q = self._prepare_q(q).unsqueeze(1)
        decode = attn_metadata.decode
        num_rows = q.shape[0]
        block_table, seq_lens, _ = self._flattened_decode_metadata(
            attn_metadata, num_rows
        )
        global_bound = decode.dcp_tot_seq_lens if self.dcp_world_size > 1 else None
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        outs, lses = [], []
        for start in range(0, num_rows, self.max_rows_per_launch):
            end = min(start + self.max_rows_per_launch, num_rows)
            extra_kwargs: dict[str, Any] = {}
            if global_bound is not None:
                extra_kwargs = dict(
                    enable_dcp=True,
                    cp_world=self.dcp_world_size,
                    cp_rank=self.dcp_rank,
                    causal_seqlens_kv_global=global_bound[start:end],
                    backend="cute-dsl",
                )
            kernel_out = trtllm_batch_decode_with_kv_cache_mla(
                query=q[start:end],
                kv_cache=kv_c_and_k_pe_cache.unsqueeze(1),
                workspace_buffer=_get_workspace_buffer(return_lse),
                qk_nope_head_dim=self.qk_nope_head_dim,
                kv_lora_rank=self.kv_lora_rank,
                qk_rope_head_dim=self.qk_rope_head_dim,
                block_tables=block_table[start:end],
                seq_lens=seq_lens[start:end],
                max_seq_len=attn_metadata.max_seq_len,
                bmm1_scale=self.bmm1_scale,
                bmm2_scale=self.bmm2_scale,
                return_lse=return_lse,
                **extra_kwargs,
            )
            o, lse = self._finish(kernel_out, return_lse)
            outs.append(o)
            lses.append(lse)
        lse_out = torch.cat(lses) if return_lse else None
        return torch.cat(outs), lse_out


class UniformFastPathMLAImpl(FlashInferMLADecodeBase):
    def _maybe_row_map(
        self, attn_metadata: FlashInferMLAMetadata, num_rows: int
    ) -> torch.Tensor | None:
        """None when the batch is uniform (cheap repeat_interleave path)."""
        decode = attn_metadata.decode
        if attn_metadata.num_decode_tokens == decode.max_query_len * attn_metadata.num_decodes:
            return None
        return decode_row_map(decode, num_rows)

    # idiom: FlashInferMLAImpl.forward_mqa with a uniform fast path (0.29 repeat_interleave of block_table/seq_lens) and a ragged path (0.33 row_req); the DCP bound is indexed only when a row map exists
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = self._prepare_q(q)
        decode = attn_metadata.decode
        block_table, seq_lens = decode.block_table, decode.seq_lens
        row_req = None
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            query_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
            row_req = self._maybe_row_map(attn_metadata, q.shape[0])
            if row_req is not None:
                block_table, seq_lens = block_table[row_req], seq_lens[row_req]
            elif query_len > 1:
                block_table = expand_uniform(block_table, query_len)
                seq_lens = expand_uniform(seq_lens, query_len)
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            bound = decode.dcp_tot_seq_lens
            assert bound is not None
            if row_req is not None:
                bound = bound[row_req]
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=bound,
                backend="cute-dsl",
            )
        self._ensure_scales(layer)
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
        return self._finish(kernel_out, return_lse)


class LayoutMatchMLAImpl(FlashInferMLADecodeBase):
    # idiom: FlashInferMLAImpl.forward_mqa restructured as a match on the decode layout; the "flat" arm unpacks _flattened_decode_metadata but drops its row_req (`_`), so the DCP bound stays per request
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = self._prepare_q(q)
        decode = attn_metadata.decode
        block_table, seq_lens = decode.block_table, decode.seq_lens
        if not attn_metadata.causal:
            layout = "flat"
        elif attn_metadata.num_decode_tokens % attn_metadata.num_decodes:
            layout = "ragged"
        else:
            layout = "uniform"
        match layout:
            case "flat":
                q = q.unsqueeze(1)
                block_table, seq_lens, _ = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
            case "ragged":
                q = q.unsqueeze(1)
            case _:
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
        self._ensure_scales(layer)
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
        return self._finish(kernel_out, return_lse)


# ---------------------------------------------------------------------------
# Geometry kept consistent.
# ---------------------------------------------------------------------------
class UpstreamRowReqMLAImpl(FlashInferMLADecodeBase):
    # idiom: FlashInferMLAImpl.forward_mqa (vLLM 0.33): block_table/seq_lens from _flattened_decode_metadata and causal_seqlens_kv_global[row_req] with the same row map
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = self._prepare_q(q)
        decode = attn_metadata.decode
        block_table, seq_lens = decode.block_table, decode.seq_lens
        multi_token_decode = (
            decode.max_query_len > 1
            or attn_metadata.num_decode_tokens > attn_metadata.num_decodes
        )
        row_req: torch.Tensor | None = None
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if multi_token_decode:
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
        self._ensure_scales(layer)
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
        return self._finish(kernel_out, return_lse)


class RepeatAllMLAImpl(FlashInferMLADecodeBase):
    # idiom: FlashInferMLAImpl.forward_mqa (vLLM 0.29/0.30): block_table, seq_lens and causal_seqlens_kv_global all repeat_interleave(query_len) under the same `not causal and query_len > 1`
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = self._prepare_q(q)
        block_table = attn_metadata.decode.block_table
        seq_lens = attn_metadata.decode.seq_lens
        query_len = 1
        if not attn_metadata.causal:
            query_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
            q = q.unsqueeze(1)
            if query_len > 1:
                block_table = block_table.repeat_interleave(query_len, dim=0)
                seq_lens = seq_lens.repeat_interleave(query_len)
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = attn_metadata.decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            if not attn_metadata.causal and query_len > 1:
                causal_seqlens_kv_global = causal_seqlens_kv_global.repeat_interleave(
                    query_len
                )
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
                backend="cute-dsl",
            )
        self._ensure_scales(layer)
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
        return self._finish(kernel_out, return_lse)


class NoDcpFlatMLAImpl(FlashInferMLADecodeBase):
    # idiom: FlashInferMLAImpl.forward_mqa for a drafter-only impl that refuses DCP up front (raise before any launch) and flattens block_table/seq_lens; no causal_seqlens_kv_global is ever passed
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.dcp_world_size > 1:
            raise NotImplementedError("NoDcpFlatMLAImpl does not support DCP.")
        assert attn_metadata.decode is not None
        q = self._prepare_q(q).unsqueeze(1)
        block_table, seq_lens, _ = self._flattened_decode_metadata(
            attn_metadata, q.shape[0]
        )
        self._ensure_scales(layer)
        kernel_out = trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_c_and_k_pe_cache.unsqueeze(1),
            workspace_buffer=_get_workspace_buffer(False),
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_table,
            seq_lens=seq_lens,
            max_seq_len=attn_metadata.max_seq_len,
            bmm1_scale=self.bmm1_scale,
            bmm2_scale=self.bmm2_scale,
            return_lse=False,
        )
        return self._finish(kernel_out, False)


class CausalOnlyDcpMLAImpl(FlashInferMLADecodeBase):
    # idiom: FlashInferMLAImpl.forward_mqa causal-only fast path (q.view per request, nothing flattened) with the per-request global bound, non-causal batches delegated to the upstream impl by early return
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not attn_metadata.causal:
            return super().forward_mqa(q, kv_c_and_k_pe_cache, attn_metadata, layer)
        assert attn_metadata.decode is not None
        q = self._prepare_q(q)
        q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        decode = attn_metadata.decode
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
                backend="cute-dsl",
            )
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        kernel_out = trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_c_and_k_pe_cache.unsqueeze(1),
            workspace_buffer=_get_workspace_buffer(return_lse),
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=decode.block_table,
            seq_lens=decode.seq_lens,
            max_seq_len=attn_metadata.max_seq_len,
            bmm1_scale=self.bmm1_scale,
            bmm2_scale=self.bmm2_scale,
            return_lse=return_lse,
            **extra_kwargs,
        )
        return self._finish(kernel_out, return_lse)


class TripleExpandMLAImpl(FlashInferMLADecodeBase):
    def _expand_geometry(
        self, attn_metadata: FlashInferMLAMetadata, num_rows: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        decode = attn_metadata.decode
        row_req = decode_row_map(decode, num_rows)
        bound = decode.dcp_tot_seq_lens
        return (
            decode.block_table[row_req],
            decode.seq_lens[row_req],
            None if bound is None else bound[row_req],
        )

    # idiom: helper method returning (block_table, seq_lens, causal_seqlens_kv_global) all indexed by one searchsorted row map, tuple-unpacked before the launch
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = self._prepare_q(q)
        decode = attn_metadata.decode
        block_table, seq_lens = decode.block_table, decode.seq_lens
        global_bound = decode.dcp_tot_seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            block_table, seq_lens, global_bound = self._expand_geometry(
                attn_metadata, q.shape[0]
            )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            assert global_bound is not None
            extra_kwargs = dict(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=global_bound,
                backend="cute-dsl",
            )
        self._ensure_scales(layer)
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
        return self._finish(kernel_out, return_lse)


class CachedRowReqMLAImpl(FlashInferMLADecodeBase):
    # idiom: FlashInferMLAImpl._flattened_decode_metadata's row map cached on the decode metadata (decode.flattened_row_req), reused for causal_seqlens_kv_global via kwargs .update
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = self._prepare_q(q)
        decode = attn_metadata.decode
        flattened = False
        block_table, seq_lens = decode.block_table, decode.seq_lens
        if not attn_metadata.causal and (
            attn_metadata.num_decode_tokens > attn_metadata.num_decodes
        ):
            q = q.unsqueeze(1)
            self._flattened_decode_metadata(attn_metadata, q.shape[0])
            block_table = decode.flattened_block_table
            seq_lens = decode.flattened_seq_lens
            flattened = True
        elif not attn_metadata.causal:
            q = q.unsqueeze(1)
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {"backend": "cute-dsl"}
        if self.dcp_world_size > 1:
            bound = decode.dcp_tot_seq_lens
            assert bound is not None
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=(
                    bound[decode.flattened_row_req] if flattened else bound
                ),
            )
        self._ensure_scales(layer)
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
        return self._finish(kernel_out, return_lse)


class RaggedRepeatMLAImpl(FlashInferMLADecodeBase):
    # idiom: ragged flattening with torch.repeat_interleave by the per-request query lengths (query_start_loc.diff()) applied identically to block_table, seq_lens and causal_seqlens_kv_global
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = self._prepare_q(q)
        decode = attn_metadata.decode
        block_table, seq_lens = decode.block_table, decode.seq_lens
        global_bound = decode.dcp_tot_seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            assert decode.query_start_loc is not None
            counts = decode.query_start_loc[: attn_metadata.num_decodes + 1].diff()
            num_rows = q.shape[0]
            expand = lambda t: torch.repeat_interleave(  # noqa: E731
                t, counts, dim=0, output_size=num_rows
            )
            block_table, seq_lens = expand(block_table), expand(seq_lens)
            if global_bound is not None:
                global_bound = expand(global_bound)
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=global_bound,
                backend="cute-dsl",
            )
        self._ensure_scales(layer)
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
        return self._finish(kernel_out, return_lse)
