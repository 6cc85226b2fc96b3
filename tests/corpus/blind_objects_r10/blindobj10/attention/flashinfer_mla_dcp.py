# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""FlashInfer MLA decode variants for non-causal (DSpark) draft blocks under DCP."""
from collections.abc import Iterator
from typing import Any

import torch
from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

from vllm.v1.attention.backend import AttentionLayer
from vllm.v1.attention.backends.mla.flashinfer_mla import (
    FlashInferMLAImpl,
    FlashInferMLAMetadata,
    _get_workspace_buffer,
)


def _prepare_query(q: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    if isinstance(q, tuple):
        q_nope, q_pe = q
        q = torch.cat([q_nope, q_pe], dim=-1)
    return q



class InterleavedRowsMLAImpl(FlashInferMLAImpl):
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = _prepare_query(q)
        block_table = attn_metadata.decode.block_table
        seq_lens = attn_metadata.decode.seq_lens
        num_decodes = attn_metadata.num_decodes
        query_len = attn_metadata.num_decode_tokens // num_decodes
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if query_len > 1:
                block_table = block_table.repeat_interleave(query_len, dim=0)
                seq_lens = seq_lens.repeat_interleave(query_len)
        else:
            q = q.view(num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = attn_metadata.decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
            )
            extra_kwargs["backend"] = "cute-dsl"
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
            bmm1_scale=self.scale,
            bmm2_scale=1.0,
            return_lse=return_lse,
            **extra_kwargs,
        )
        if return_lse:
            o, lse = kernel_out
            lse = lse.view(-1, lse.shape[-1])
        else:
            o, lse = kernel_out, None
        return o.view(-1, o.shape[-2], o.shape[-1]), lse


class InterleavedRowsGlobalMLAImpl(FlashInferMLAImpl):
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = _prepare_query(q)
        block_table = attn_metadata.decode.block_table
        seq_lens = attn_metadata.decode.seq_lens
        num_decodes = attn_metadata.num_decodes
        query_len = attn_metadata.num_decode_tokens // num_decodes
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if query_len > 1:
                block_table = block_table.repeat_interleave(query_len, dim=0)
                seq_lens = seq_lens.repeat_interleave(query_len)
        else:
            q = q.view(num_decodes, -1, q.shape[-2], q.shape[-1])
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
            )
            extra_kwargs["backend"] = "cute-dsl"
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
            bmm1_scale=self.scale,
            bmm2_scale=1.0,
            return_lse=return_lse,
            **extra_kwargs,
        )
        if return_lse:
            o, lse = kernel_out
            lse = lse.view(-1, lse.shape[-1])
        else:
            o, lse = kernel_out, None
        return o.view(-1, o.shape[-2], o.shape[-1]), lse


class ExpandedRowsMLAImpl(FlashInferMLAImpl):
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = _prepare_query(q)
        block_table = attn_metadata.decode.block_table
        seq_lens = attn_metadata.decode.seq_lens
        num_decodes = attn_metadata.num_decodes
        query_len = attn_metadata.num_decode_tokens // num_decodes
        if not attn_metadata.causal and query_len > 1:
            q = q.unsqueeze(1)
            block_table = (
                block_table.unsqueeze(1)
                .expand(-1, query_len, -1)
                .reshape(-1, block_table.shape[-1])
            )
            seq_lens = seq_lens.unsqueeze(1).expand(-1, query_len).reshape(-1)
        elif not attn_metadata.causal:
            q = q.unsqueeze(1)
        else:
            q = q.view(num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = attn_metadata.decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
            )
            extra_kwargs["backend"] = "cute-dsl"
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
            bmm1_scale=self.scale,
            bmm2_scale=1.0,
            return_lse=return_lse,
            **extra_kwargs,
        )
        if return_lse:
            o, lse = kernel_out
            lse = lse.view(-1, lse.shape[-1])
        else:
            o, lse = kernel_out, None
        return o.view(-1, o.shape[-2], o.shape[-1]), lse


class ExpandedRowsGlobalMLAImpl(FlashInferMLAImpl):
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = _prepare_query(q)
        block_table = attn_metadata.decode.block_table
        seq_lens = attn_metadata.decode.seq_lens
        num_decodes = attn_metadata.num_decodes
        query_len = attn_metadata.num_decode_tokens // num_decodes
        if not attn_metadata.causal and query_len > 1:
            q = q.unsqueeze(1)
            block_table = (
                block_table.unsqueeze(1)
                .expand(-1, query_len, -1)
                .reshape(-1, block_table.shape[-1])
            )
            seq_lens = seq_lens.unsqueeze(1).expand(-1, query_len).reshape(-1)
        elif not attn_metadata.causal:
            q = q.unsqueeze(1)
        else:
            q = q.view(num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = attn_metadata.decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            if not attn_metadata.causal and query_len > 1:
                causal_seqlens_kv_global = (
                    causal_seqlens_kv_global.unsqueeze(1)
                    .expand(-1, query_len)
                    .reshape(-1)
                )
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
            )
            extra_kwargs["backend"] = "cute-dsl"
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
            bmm1_scale=self.scale,
            bmm2_scale=1.0,
            return_lse=return_lse,
            **extra_kwargs,
        )
        if return_lse:
            o, lse = kernel_out
            lse = lse.view(-1, lse.shape[-1])
        else:
            o, lse = kernel_out, None
        return o.view(-1, o.shape[-2], o.shape[-1]), lse


class RaggedRowsMLAImpl(FlashInferMLAImpl):
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = _prepare_query(q)
        block_table = attn_metadata.decode.block_table
        seq_lens = attn_metadata.decode.seq_lens
        num_decodes = attn_metadata.num_decodes
        query_len = attn_metadata.num_decode_tokens // num_decodes
        row_req: torch.Tensor | None = None
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            cu = attn_metadata.decode.query_start_loc
            assert cu is not None
            rows = torch.arange(q.shape[0], device=cu.device, dtype=cu.dtype)
            row_req = torch.searchsorted(cu[1:], rows, right=True).clamp_(
                max=block_table.shape[0] - 1
            )
            block_table = block_table[row_req]
            seq_lens = seq_lens[row_req]
        else:
            q = q.view(num_decodes, -1, q.shape[-2], q.shape[-1])
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
            )
            extra_kwargs["backend"] = "cute-dsl"
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
            bmm1_scale=self.scale,
            bmm2_scale=1.0,
            return_lse=return_lse,
            **extra_kwargs,
        )
        if return_lse:
            o, lse = kernel_out
            lse = lse.view(-1, lse.shape[-1])
        else:
            o, lse = kernel_out, None
        return o.view(-1, o.shape[-2], o.shape[-1]), lse


class RaggedRowsGlobalMLAImpl(FlashInferMLAImpl):
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = _prepare_query(q)
        block_table = attn_metadata.decode.block_table
        seq_lens = attn_metadata.decode.seq_lens
        num_decodes = attn_metadata.num_decodes
        query_len = attn_metadata.num_decode_tokens // num_decodes
        row_req: torch.Tensor | None = None
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            cu = attn_metadata.decode.query_start_loc
            assert cu is not None
            rows = torch.arange(q.shape[0], device=cu.device, dtype=cu.dtype)
            row_req = torch.searchsorted(cu[1:], rows, right=True).clamp_(
                max=block_table.shape[0] - 1
            )
            block_table = block_table[row_req]
            seq_lens = seq_lens[row_req]
        else:
            q = q.view(num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = attn_metadata.decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            if row_req is not None:
                causal_seqlens_kv_global = causal_seqlens_kv_global[row_req]
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
            )
            extra_kwargs["backend"] = "cute-dsl"
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
            bmm1_scale=self.scale,
            bmm2_scale=1.0,
            return_lse=return_lse,
            **extra_kwargs,
        )
        if return_lse:
            o, lse = kernel_out
            lse = lse.view(-1, lse.shape[-1])
        else:
            o, lse = kernel_out, None
        return o.view(-1, o.shape[-2], o.shape[-1]), lse


class TiledGlobalMLAImpl(FlashInferMLAImpl):
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = _prepare_query(q)
        block_table = attn_metadata.decode.block_table
        seq_lens = attn_metadata.decode.seq_lens
        num_decodes = attn_metadata.num_decodes
        query_len = attn_metadata.num_decode_tokens // num_decodes
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if query_len > 1:
                block_table = block_table.repeat_interleave(query_len, dim=0)
                seq_lens = seq_lens.repeat_interleave(query_len)
        else:
            q = q.view(num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = attn_metadata.decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            if not attn_metadata.causal and query_len > 1:
                causal_seqlens_kv_global = causal_seqlens_kv_global.repeat(query_len)
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
            )
            extra_kwargs["backend"] = "cute-dsl"
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
            bmm1_scale=self.scale,
            bmm2_scale=1.0,
            return_lse=return_lse,
            **extra_kwargs,
        )
        if return_lse:
            o, lse = kernel_out
            lse = lse.view(-1, lse.shape[-1])
        else:
            o, lse = kernel_out, None
        return o.view(-1, o.shape[-2], o.shape[-1]), lse


class RenamedGlobalMLAImpl(FlashInferMLAImpl):
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = _prepare_query(q)
        block_table = attn_metadata.decode.block_table
        seq_lens = attn_metadata.decode.seq_lens
        num_decodes = attn_metadata.num_decodes
        query_len = attn_metadata.num_decode_tokens // num_decodes
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if query_len > 1:
                block_table = block_table.repeat_interleave(query_len, dim=0)
                seq_lens = seq_lens.repeat_interleave(query_len)
        else:
            q = q.view(num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = attn_metadata.decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            if not attn_metadata.causal and query_len > 1:
                global_rows = causal_seqlens_kv_global.repeat_interleave(query_len)
                assert global_rows.shape[0] == seq_lens.shape[0]
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
            )
            extra_kwargs["backend"] = "cute-dsl"
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
            bmm1_scale=self.scale,
            bmm2_scale=1.0,
            return_lse=return_lse,
            **extra_kwargs,
        )
        if return_lse:
            o, lse = kernel_out
            lse = lse.view(-1, lse.shape[-1])
        else:
            o, lse = kernel_out, None
        return o.view(-1, o.shape[-2], o.shape[-1]), lse


class CausalOnlyMLAImpl(FlashInferMLAImpl):
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = _prepare_query(q)
        block_table = attn_metadata.decode.block_table
        seq_lens = attn_metadata.decode.seq_lens
        num_decodes = attn_metadata.num_decodes
        query_len = attn_metadata.num_decode_tokens // num_decodes
        if not attn_metadata.causal:
            raise NotImplementedError(
                "Non-causal multi-token decode is not supported by this backend."
            )
        q = q.view(num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = attn_metadata.decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
            )
            extra_kwargs["backend"] = "cute-dsl"
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
            bmm1_scale=self.scale,
            bmm2_scale=1.0,
            return_lse=return_lse,
            **extra_kwargs,
        )
        if return_lse:
            o, lse = kernel_out
            lse = lse.view(-1, lse.shape[-1])
        else:
            o, lse = kernel_out, None
        return o.view(-1, o.shape[-2], o.shape[-1]), lse


class KwargsHelperMLAImpl(FlashInferMLAImpl):
    def _dcp_kwargs(self, attn_metadata: FlashInferMLAMetadata) -> dict[str, Any]:
        if self.dcp_world_size == 1:
            return {}
        assert attn_metadata.decode is not None
        return dict(
            enable_dcp=True,
            cp_world=self.dcp_world_size,
            cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=attn_metadata.decode.dcp_tot_seq_lens,
            backend="cute-dsl",
        )

    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = _prepare_query(q)
        block_table = attn_metadata.decode.block_table
        seq_lens = attn_metadata.decode.seq_lens
        num_decodes = attn_metadata.num_decodes
        if attn_metadata.causal:
            q = q.view(num_decodes, -1, q.shape[-2], q.shape[-1])
        else:
            query_len = attn_metadata.num_decode_tokens // num_decodes
            q = q.unsqueeze(1)
            block_table = torch.repeat_interleave(block_table, query_len, dim=0)
            seq_lens = torch.repeat_interleave(seq_lens, query_len)
        extra_kwargs = self._dcp_kwargs(attn_metadata)
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
            bmm1_scale=self.scale,
            bmm2_scale=1.0,
            return_lse=return_lse,
            **extra_kwargs,
        )
        if return_lse:
            o, lse = kernel_out
            lse = lse.view(-1, lse.shape[-1])
        else:
            o, lse = kernel_out, None
        return o.view(-1, o.shape[-2], o.shape[-1]), lse


class RowAwareKwargsMLAImpl(FlashInferMLAImpl):
    def _dcp_kwargs(
        self,
        attn_metadata: FlashInferMLAMetadata,
        query_len: int,
    ) -> dict[str, Any]:
        if self.dcp_world_size == 1:
            return {}
        assert attn_metadata.decode is not None
        causal_seqlens_kv_global = attn_metadata.decode.dcp_tot_seq_lens
        assert causal_seqlens_kv_global is not None
        if query_len > 1:
            causal_seqlens_kv_global = torch.repeat_interleave(
                causal_seqlens_kv_global, query_len
            )
        return dict(
            enable_dcp=True,
            cp_world=self.dcp_world_size,
            cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=causal_seqlens_kv_global,
            backend="cute-dsl",
        )

    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = _prepare_query(q)
        block_table = attn_metadata.decode.block_table
        seq_lens = attn_metadata.decode.seq_lens
        num_decodes = attn_metadata.num_decodes
        rows_per_req = 1
        if attn_metadata.causal:
            q = q.view(num_decodes, -1, q.shape[-2], q.shape[-1])
        else:
            rows_per_req = attn_metadata.num_decode_tokens // num_decodes
            q = q.unsqueeze(1)
            block_table = torch.repeat_interleave(block_table, rows_per_req, dim=0)
            seq_lens = torch.repeat_interleave(seq_lens, rows_per_req)
        extra_kwargs = self._dcp_kwargs(attn_metadata, rows_per_req)
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
            bmm1_scale=self.scale,
            bmm2_scale=1.0,
            return_lse=return_lse,
            **extra_kwargs,
        )
        if return_lse:
            o, lse = kernel_out
            lse = lse.view(-1, lse.shape[-1])
        else:
            o, lse = kernel_out, None
        return o.view(-1, o.shape[-2], o.shape[-1]), lse


def _request_chunks(num_decodes: int, max_rows: int, query_len: int) -> Iterator[tuple[int, int]]:
    reqs_per_chunk = max(1, max_rows // query_len)
    for start in range(0, num_decodes, reqs_per_chunk):
        yield start, min(start + reqs_per_chunk, num_decodes)


class ChunkedDecodeMLAImpl(FlashInferMLAImpl):
    """Splits large flattened draft blocks to bound the workspace."""

    max_rows_per_launch: int = 8192

    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        assert not attn_metadata.causal
        assert self.dcp_world_size > 1
        q = _prepare_query(q).unsqueeze(1)
        num_decodes = attn_metadata.num_decodes
        query_len = attn_metadata.num_decode_tokens // num_decodes
        global_lens = attn_metadata.decode.dcp_tot_seq_lens
        assert global_lens is not None
        return_lse = self.need_to_return_lse_for_decode
        outs: list[torch.Tensor] = []
        lses: list[torch.Tensor] = []
        for start, end in _request_chunks(
            num_decodes, self.max_rows_per_launch, query_len
        ):
            block_table = attn_metadata.decode.block_table[start:end]
            seq_lens = attn_metadata.decode.seq_lens[start:end]
            kernel_out = trtllm_batch_decode_with_kv_cache_mla(
                query=q[start * query_len : end * query_len],
                kv_cache=kv_c_and_k_pe_cache.unsqueeze(1),
                workspace_buffer=_get_workspace_buffer(return_lse),
                qk_nope_head_dim=self.qk_nope_head_dim,
                kv_lora_rank=self.kv_lora_rank,
                qk_rope_head_dim=self.qk_rope_head_dim,
                block_tables=block_table.repeat_interleave(query_len, dim=0),
                seq_lens=seq_lens.repeat_interleave(query_len),
                max_seq_len=attn_metadata.max_seq_len,
                bmm1_scale=self.scale,
                bmm2_scale=1.0,
                return_lse=return_lse,
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=global_lens[start:end],
                backend="cute-dsl",
            )
            if return_lse:
                o, lse = kernel_out
                lses.append(lse.view(-1, lse.shape[-1]))
            else:
                o = kernel_out
            outs.append(o.view(-1, o.shape[-2], o.shape[-1]))
        return torch.cat(outs), (torch.cat(lses) if lses else None)


class NoDCPFlattenMLAImpl(FlashInferMLAImpl):
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        assert self.dcp_world_size == 1, "use the DCP-aware impl with DCP"
        q = _prepare_query(q)
        block_table = attn_metadata.decode.block_table
        seq_lens = attn_metadata.decode.seq_lens
        num_decodes = attn_metadata.num_decodes
        query_len = attn_metadata.num_decode_tokens // num_decodes
        if not attn_metadata.causal and query_len > 1:
            q = q.unsqueeze(1)
            block_table = block_table.repeat_interleave(query_len, dim=0)
            seq_lens = seq_lens.repeat_interleave(query_len)
        else:
            q = q.view(num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
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
            bmm1_scale=self.scale,
            bmm2_scale=1.0,
            return_lse=return_lse,
            **extra_kwargs,
        )
        if return_lse:
            o, lse = kernel_out
            lse = lse.view(-1, lse.shape[-1])
        else:
            o, lse = kernel_out, None
        return o.view(-1, o.shape[-2], o.shape[-1]), lse
