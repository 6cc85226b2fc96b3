# SPDX-License-Identifier: Apache-2.0
"""FlashInfer MLA decode variants carried by the fork.

FlashInfer's decode kernel has no causal flag, so a non-causal DSpark query
block is flattened into one decode row per query token. Under DCP the native
context-parallel kernel also takes the global causal bound, one per row.
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

from blindobj8._mla_common import FlashInferDecodeMixin

logger = init_logger(__name__)


# idiom: vllm 0.29.0 vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa; module-level launcher, block_tables/seq_lens repeat_interleave'd, global bound left per request
# expect: SG202
def flat_decode_with_dcp(
    impl: FlashInferMLAImpl,
    q: torch.Tensor,
    kv_c_and_k_pe_cache: torch.Tensor,
    attn_metadata: FlashInferMLAMetadata,
    query_len: int,
    return_lse: bool,
) -> Any:
    """One-row-per-token decode of uniform non-causal blocks with native DCP."""
    decode = attn_metadata.decode
    assert decode is not None and decode.dcp_tot_seq_lens is not None
    return trtllm_batch_decode_with_kv_cache_mla(
        query=q.unsqueeze(1),
        kv_cache=kv_c_and_k_pe_cache.unsqueeze(1),
        workspace_buffer=_get_workspace_buffer(return_lse),
        qk_nope_head_dim=impl.qk_nope_head_dim,
        kv_lora_rank=impl.kv_lora_rank,
        qk_rope_head_dim=impl.qk_rope_head_dim,
        block_tables=decode.block_table.repeat_interleave(query_len, dim=0),
        seq_lens=decode.seq_lens.repeat_interleave(query_len),
        max_seq_len=attn_metadata.max_seq_len,
        bmm1_scale=impl.bmm1_scale,
        bmm2_scale=impl.bmm2_scale,
        return_lse=return_lse,
        backend="cute-dsl",
        enable_dcp=True,
        cp_world=impl.dcp_world_size,
        cp_rank=impl.dcp_rank,
        causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
    )


class UniformFlattenMLAImpl(FlashInferDecodeMixin, FlashInferMLAImpl):
    """Uniform-query-length flattening (pre-ragged builder)."""

    # idiom: vllm 0.28.0 vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa + native DCP kwargs; tables expanded, causal bound per request
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = self._query_tensor(q)
        block_table = attn_metadata.decode.block_table
        seq_lens = attn_metadata.decode.seq_lens
        if not attn_metadata.causal:
            query_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
            q = q.unsqueeze(1)
            if query_len > 1:
                block_table = block_table.repeat_interleave(query_len, dim=0)
                seq_lens = seq_lens.repeat_interleave(query_len)
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = self._launch_kwargs(q, kv_c_and_k_pe_cache)
        if self.dcp_world_size > 1:
            assert attn_metadata.decode.dcp_tot_seq_lens is not None
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=attn_metadata.decode.dcp_tot_seq_lens,
            )
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


class UniformFlattenDcpMLAImpl(FlashInferDecodeMixin, FlashInferMLAImpl):
    """Uniform-query-length flattening with the DCP fix applied."""

    # idiom: vllm 0.29.0 vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa; global bound repeat_interleave'd by the same query_len as the tables
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = self._query_tensor(q)
        block_table = attn_metadata.decode.block_table
        seq_lens = attn_metadata.decode.seq_lens
        query_len = 1
        if not attn_metadata.causal:
            # The builder declares UNIFORM query-length support, so every
            # decode request carries the same block width.
            query_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
            q = q.unsqueeze(1)
            if query_len > 1:
                block_table = block_table.repeat_interleave(query_len, dim=0)
                seq_lens = seq_lens.repeat_interleave(query_len)
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = self._launch_kwargs(q, kv_c_and_k_pe_cache)
        if self.dcp_world_size > 1:
            assert self.cp_kv_cache_interleave_size == 1
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


class MixedMapMLAImpl(FlashInferDecodeMixin, FlashInferMLAImpl):
    """Ragged flattening with the uniform DCP expansion kept from 0.29."""

    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa + _flattened_decode_metadata; tables by searchsorted row map, bound by uniform repeat_interleave
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
        q = self._query_tensor(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        multi_token_decode = (
            decode.max_query_len > 1
            or attn_metadata.num_decode_tokens > attn_metadata.num_decodes
        )
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if multi_token_decode:
                block_table, seq_lens, _ = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = self._launch_kwargs(q, kv_c_and_k_pe_cache)
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            if not attn_metadata.causal and multi_token_decode:
                query_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
                causal_seqlens_kv_global = causal_seqlens_kv_global.repeat_interleave(
                    query_len
                )
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
            )
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


class RowMapMLAImpl(FlashInferDecodeMixin, FlashInferMLAImpl):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa; one searchsorted row map gathers tables, lengths and the global bound
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
        q = self._query_tensor(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        row_req: torch.Tensor | None = None
        multi_token_decode = (
            decode.max_query_len > 1
            or attn_metadata.num_decode_tokens > attn_metadata.num_decodes
        )
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if multi_token_decode:
                block_table, seq_lens, row_req = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = self._launch_kwargs(q, kv_c_and_k_pe_cache)
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
            )
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


class BoundGuardMLAImpl(FlashInferDecodeMixin, FlashInferMLAImpl):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa; tables expanded under multi_token_decode, bound only under max_query_len > 1
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
        q = self._query_tensor(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        row_req = None
        flatten = not attn_metadata.causal and (
            decode.max_query_len > 1
            or attn_metadata.num_decode_tokens > attn_metadata.num_decodes
        )
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        if flatten:
            block_table, seq_lens, row_req = self._flattened_decode_metadata(
                attn_metadata, q.shape[0]
            )
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = self._launch_kwargs(q, kv_c_and_k_pe_cache)
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            if decode.max_query_len > 1 and row_req is not None:
                causal_seqlens_kv_global = causal_seqlens_kv_global[row_req]
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
            )
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


class TiledBoundMLAImpl(FlashInferDecodeMixin, FlashInferMLAImpl):
    # idiom: vllm 0.29.0 vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa; bound tiled with .repeat() while tables are repeat_interleave'd
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
        q = self._query_tensor(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        query_len = 1
        if not attn_metadata.causal:
            query_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
            q = q.unsqueeze(1)
            if query_len > 1:
                block_table = block_table.repeat_interleave(query_len, dim=0)
                seq_lens = seq_lens.repeat_interleave(query_len)
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = self._launch_kwargs(q, kv_c_and_k_pe_cache)
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            if query_len > 1:
                causal_seqlens_kv_global = causal_seqlens_kv_global.repeat(query_len)
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
            )
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


class HelperKwargsMLAImpl(FlashInferDecodeMixin, FlashInferMLAImpl):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa; DCP kwargs from a mixin helper (per-request bound) merged after the tables were flattened
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
        q = self._query_tensor(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if decode.max_query_len > 1 or (
                attn_metadata.num_decode_tokens > attn_metadata.num_decodes
            ):
                block_table, seq_lens, _ = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = {
            **self._launch_kwargs(q, kv_c_and_k_pe_cache),
            **self._native_dcp_kwargs(attn_metadata),
        }
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


class ShadowedBoundMLAImpl(FlashInferDecodeMixin, FlashInferMLAImpl):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa; expanded bound computed into a new name, launch kwargs read the original per-request tensor
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
        q = self._query_tensor(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        row_req = None
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if decode.max_query_len > 1 or (
                attn_metadata.num_decode_tokens > attn_metadata.num_decodes
            ):
                block_table, seq_lens, row_req = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs: dict[str, Any] = self._launch_kwargs(q, kv_c_and_k_pe_cache)
        if self.dcp_world_size > 1:
            assert decode.dcp_tot_seq_lens is not None
            global_rows = (
                decode.dcp_tot_seq_lens
                if row_req is None
                else decode.dcp_tot_seq_lens[row_req]
            )
            logger.debug("DCP decode rows: %d", global_rows.shape[0])
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
            )
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


class GatheredRowsMLAImpl(FlashInferDecodeMixin, FlashInferMLAImpl):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl._flattened_decode_metadata; dict of per-request tensors (bound included) gathered with index_select in a comprehension
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
        q = self._query_tensor(q)
        per_req: dict[str, torch.Tensor] = {
            "block_tables": decode.block_table,
            "seq_lens": decode.seq_lens,
        }
        if self.dcp_world_size > 1:
            assert decode.dcp_tot_seq_lens is not None
            per_req["causal_seqlens_kv_global"] = decode.dcp_tot_seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if decode.max_query_len > 1 or (
                attn_metadata.num_decode_tokens > attn_metadata.num_decodes
            ):
                cu = decode.query_start_loc
                assert cu is not None
                rows = torch.arange(q.shape[0], device=cu.device, dtype=cu.dtype)
                row_req = torch.searchsorted(cu[1:], rows, right=True).clamp_(
                    max=decode.block_table.shape[0] - 1
                )
                per_req = {k: v.index_select(0, row_req) for k, v in per_req.items()}
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = self._launch_kwargs(q, kv_c_and_k_pe_cache)
        if self.dcp_world_size > 1:
            extra_kwargs.update(
                enable_dcp=True, cp_world=self.dcp_world_size, cp_rank=self.dcp_rank
            )
        kernel_out = trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_c_and_k_pe_cache.unsqueeze(1),
            workspace_buffer=_get_workspace_buffer(return_lse),
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            max_seq_len=attn_metadata.max_seq_len,
            bmm1_scale=self.bmm1_scale,
            bmm2_scale=self.bmm2_scale,
            return_lse=return_lse,
            **per_req,
            **extra_kwargs,
        )
        return self._finish(kernel_out, return_lse)


class PartialGatherMLAImpl(FlashInferDecodeMixin, FlashInferMLAImpl):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl._flattened_decode_metadata; dict comprehension gathers tables/lengths, bound added afterwards straight from decode metadata
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
        q = self._query_tensor(q)
        per_req: dict[str, torch.Tensor] = {
            "block_tables": decode.block_table,
            "seq_lens": decode.seq_lens,
        }
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if decode.max_query_len > 1 or (
                attn_metadata.num_decode_tokens > attn_metadata.num_decodes
            ):
                _, _, row_req = self._flattened_decode_metadata(attn_metadata, q.shape[0])
                per_req = {k: v[row_req] for k, v in per_req.items()}
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = self._launch_kwargs(q, kv_c_and_k_pe_cache)
        if self.dcp_world_size > 1:
            assert decode.dcp_tot_seq_lens is not None
            extra_kwargs["enable_dcp"] = True
            extra_kwargs["cp_world"] = self.dcp_world_size
            extra_kwargs["cp_rank"] = self.dcp_rank
            extra_kwargs["causal_seqlens_kv_global"] = decode.dcp_tot_seq_lens
        kernel_out = trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_c_and_k_pe_cache.unsqueeze(1),
            workspace_buffer=_get_workspace_buffer(return_lse),
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            max_seq_len=attn_metadata.max_seq_len,
            bmm1_scale=self.bmm1_scale,
            bmm2_scale=self.bmm2_scale,
            return_lse=return_lse,
            **per_req,
            **extra_kwargs,
        )
        return self._finish(kernel_out, return_lse)


class UnpackedRowsMLAImpl(FlashInferDecodeMixin, FlashInferMLAImpl):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa; generator expression expands tables, lengths and bound with one row map
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
        q = self._query_tensor(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        bound = decode.dcp_tot_seq_lens if self.dcp_world_size > 1 else None
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if decode.max_query_len > 1 or (
                attn_metadata.num_decode_tokens > attn_metadata.num_decodes
            ):
                _, _, row_req = self._flattened_decode_metadata(attn_metadata, q.shape[0])
                if bound is None:
                    block_table, seq_lens = (t[row_req] for t in (block_table, seq_lens))
                else:
                    block_table, seq_lens, bound = (
                        t[row_req] for t in (block_table, seq_lens, bound)
                    )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = self._launch_kwargs(q, kv_c_and_k_pe_cache)
        if bound is not None:
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=bound,
            )
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


class CausalOnlyMLAImpl(FlashInferDecodeMixin, FlashInferMLAImpl):
    """Target-only FlashInfer MLA: DSpark drafts run on another backend."""

    # idiom: vllm 0.28.0 vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa (causal branch); no row expansion, bound and tables both per request
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
        if not attn_metadata.causal:
            raise NotImplementedError(
                f"{type(self).__name__} does not flatten non-causal query blocks"
            )
        q = self._query_tensor(q)
        if attn_metadata.num_decode_tokens % attn_metadata.num_decodes != 0:
            q = q.unsqueeze(1)
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = {
            **self._launch_kwargs(q, kv_c_and_k_pe_cache),
            **self._native_dcp_kwargs(attn_metadata),
        }
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


class SingleRankFlattenMLAImpl(FlashInferDecodeMixin, FlashInferMLAImpl):
    """Non-causal flattening without decode context parallelism."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.dcp_world_size > 1:
            raise NotImplementedError(
                f"{type(self).__name__} does not support decode context parallelism"
            )

    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa (dcp_world_size == 1 branch); rows expanded, no global bound is passed at all
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
        q = self._query_tensor(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if decode.max_query_len > 1 or (
                attn_metadata.num_decode_tokens > attn_metadata.num_decodes
            ):
                block_table, seq_lens, _ = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
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
            **self._launch_kwargs(q, kv_c_and_k_pe_cache),
        )
        return self._finish(kernel_out, return_lse)
