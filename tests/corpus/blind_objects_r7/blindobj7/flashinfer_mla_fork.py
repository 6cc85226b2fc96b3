# SPDX-License-Identifier: Apache-2.0
"""FlashInfer MLA decode variants of the fork (native DCP, non-causal DSpark
query blocks flattened into single-token decode rows)."""

import functools
from typing import Any, ClassVar

import torch
from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

from vllm.logger import init_logger
from vllm.v1.attention.backend import AttentionLayer
from vllm.v1.attention.backends.mla.flashinfer_mla import (
    FlashInferMLAImpl,
    FlashInferMLAMetadata,
    _get_workspace_buffer,
    _select_mla_decode_backend,
)
from vllm.v1.kv_cache_interface import is_quantized_kv_cache

from ._row_maps import DecodeRowMap

logger = init_logger(__name__)


class _ForkFlashInferMLAImplBase(FlashInferMLAImpl):
    """Shared plumbing of the fork's decode variants."""

    @staticmethod
    def _merge_query(q: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        if isinstance(q, tuple):
            q_nope, q_pe = q
            q = torch.cat([q_nope, q_pe], dim=-1)
        return q

    @staticmethod
    def _is_multi_token(attn_metadata: FlashInferMLAMetadata) -> bool:
        assert attn_metadata.decode is not None
        return (
            attn_metadata.decode.max_query_len > 1
            or attn_metadata.num_decode_tokens > attn_metadata.num_decodes
        )

    def _causal_query(
        self, q: torch.Tensor, attn_metadata: FlashInferMLAMetadata
    ) -> torch.Tensor:
        if attn_metadata.num_decode_tokens % attn_metadata.num_decodes != 0:
            logger.warning_once("FlashInferMLA fork got a query of uneven length.")
            return q.unsqueeze(1)
        return q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])

    def _ensure_scales(self, layer: AttentionLayer) -> None:
        if self.bmm1_scale is None:
            self.bmm1_scale = self.scale
            if is_quantized_kv_cache(self.kv_cache_dtype):
                self.bmm1_scale *= layer._q_scale_float * layer._k_scale_float
        if self.bmm2_scale is None:
            self.bmm2_scale = 1.0
            if is_quantized_kv_cache(self.kv_cache_dtype):
                self.bmm2_scale *= layer._k_scale_float

    def _backend_kwargs(self, q: torch.Tensor) -> dict[str, Any]:
        if self.dcp_world_size > 1:
            return {"backend": "cute-dsl"}
        backend = _select_mla_decode_backend(q.shape[-2])
        return {"backend": backend} if backend else {}

    @staticmethod
    def _split_output(
        kernel_out: Any, return_lse: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if return_lse:
            o, lse = kernel_out
            lse = lse.view(-1, lse.shape[-1])
        else:
            o, lse = kernel_out, None
        return o.view(-1, o.shape[-2], o.shape[-1]), lse


class PerRequestBoundImpl(_ForkFlashInferMLAImplBase):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa; flattened block table/seq_lens, DCP kwargs read straight from decode metadata
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = self._merge_query(q)
        block_table = attn_metadata.decode.block_table
        seq_lens = attn_metadata.decode.seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if self._is_multi_token(attn_metadata):
                block_table, seq_lens, _ = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
        else:
            q = self._causal_query(q, attn_metadata)
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = self._backend_kwargs(q)
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
        return self._split_output(kernel_out, return_lse)


class InterleaveBoundImpl(_ForkFlashInferMLAImplBase):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa (DCP fix's repeat_interleave) mixed with 0.33's searchsorted row map
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
        q = self._merge_query(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        flattened = False
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if self._is_multi_token(attn_metadata):
                block_table, seq_lens, _ = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
                flattened = True
        else:
            q = self._causal_query(q, attn_metadata)
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = self._backend_kwargs(q)
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            if flattened:
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
        return self._split_output(kernel_out, return_lse)


class EarlyKwargsImpl(_ForkFlashInferMLAImplBase):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa; DCP kwargs dict filled before the flattening, local rebound afterwards
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
        q = self._merge_query(q)
        extra_kwargs = self._backend_kwargs(q)
        causal_seqlens_kv_global = None
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
            )
        block_table, seq_lens = decode.block_table, decode.seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if self._is_multi_token(attn_metadata):
                block_table, seq_lens, row_req = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
                if causal_seqlens_kv_global is not None:
                    causal_seqlens_kv_global = causal_seqlens_kv_global[row_req]
        else:
            q = self._causal_query(q, attn_metadata)
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
        return self._split_output(kernel_out, return_lse)


class TileBoundImpl(_ForkFlashInferMLAImplBase):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa (uniform DSpark blocks); repeat_interleave for the tables, Tensor.repeat for the bound
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
        q = self._merge_query(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        query_len = 1
        if not attn_metadata.causal:
            query_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
            assert query_len * attn_metadata.num_decodes == (
                attn_metadata.num_decode_tokens
            ), "the fork's DSpark blocks are uniform"
            q = q.unsqueeze(1)
            if query_len > 1:
                block_table = block_table.repeat_interleave(query_len, dim=0)
                seq_lens = seq_lens.repeat_interleave(query_len)
        else:
            q = self._causal_query(q, attn_metadata)
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = self._backend_kwargs(q)
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
        return self._split_output(kernel_out, return_lse)


class PartialLaunchImpl(_ForkFlashInferMLAImplBase):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa; kernel bound into a functools.partial with the DCP kwargs before the rows are flattened
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
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        launch = functools.partial(
            trtllm_batch_decode_with_kv_cache_mla,
            kv_cache=kv_c_and_k_pe_cache.unsqueeze(1),
            workspace_buffer=_get_workspace_buffer(return_lse),
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            max_seq_len=attn_metadata.max_seq_len,
            bmm1_scale=self.bmm1_scale,
            bmm2_scale=self.bmm2_scale,
            return_lse=return_lse,
        )
        if self.dcp_world_size > 1:
            assert decode.dcp_tot_seq_lens is not None
            launch = functools.partial(
                launch,
                backend="cute-dsl",
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
            )
        q = self._merge_query(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if self._is_multi_token(attn_metadata):
                block_table, seq_lens, _ = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
        else:
            q = self._causal_query(q, attn_metadata)
        kernel_out = launch(query=q, block_tables=block_table, seq_lens=seq_lens)
        return self._split_output(kernel_out, return_lse)


class FlagBoundImpl(_ForkFlashInferMLAImplBase):
    # Off until the native CP kernel's per-row bound is validated on B300.
    expand_global_causal_bound: ClassVar[bool] = False

    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa; bound expansion gated by a ClassVar feature flag, tables always flattened
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
        q = self._merge_query(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        row_req: torch.Tensor | None = None
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if self._is_multi_token(attn_metadata):
                block_table, seq_lens, row_req = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
        else:
            q = self._causal_query(q, attn_metadata)
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = self._backend_kwargs(q)
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            if row_req is not None and self.expand_global_causal_bound:
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
        return self._split_output(kernel_out, return_lse)


class GuardBoundImpl(_ForkFlashInferMLAImplBase):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa; tables flattened under one test (multi-token), bound gathered under another (average query length)
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
        q = self._merge_query(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        row_req: torch.Tensor | None = None
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if self._is_multi_token(attn_metadata):
                block_table, seq_lens, row_req = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
        else:
            q = self._causal_query(q, attn_metadata)
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = self._backend_kwargs(q)
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            query_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
            if row_req is not None and query_len > 1:
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
        return self._split_output(kernel_out, return_lse)


class CachedRowsImpl(_ForkFlashInferMLAImplBase):
    _global_row_req: torch.Tensor | None = None

    def _global_rows(self, row_req: torch.Tensor) -> torch.Tensor:
        # The row map only depends on the batch layout; keep the first one.
        if self._global_row_req is None:
            self._global_row_req = row_req
        return self._global_row_req

    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa; bound gathered by a row map cached on the impl by another method
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
        q = self._merge_query(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        row_req: torch.Tensor | None = None
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if self._is_multi_token(attn_metadata):
                block_table, seq_lens, row_req = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
        else:
            q = self._causal_query(q, attn_metadata)
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = self._backend_kwargs(q)
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            if row_req is not None:
                causal_seqlens_kv_global = causal_seqlens_kv_global[
                    self._global_rows(row_req)
                ]
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
        return self._split_output(kernel_out, return_lse)


class RowReqBoundImpl(_ForkFlashInferMLAImplBase):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa; bound gathered with the same row_req as the flattened tables
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
        q = self._merge_query(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        row_req: torch.Tensor | None = None
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if self._is_multi_token(attn_metadata):
                block_table, seq_lens, row_req = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
        else:
            q = self._causal_query(q, attn_metadata)
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = self._backend_kwargs(q)
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
        return self._split_output(kernel_out, return_lse)


class UniformInterleaveImpl(_ForkFlashInferMLAImplBase):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa (DCP fix); uniform blocks asserted, all three tensors repeat_interleave(query_len)
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
        q = self._merge_query(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        query_len = 1
        if not attn_metadata.causal:
            query_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
            assert query_len * attn_metadata.num_decodes == (
                attn_metadata.num_decode_tokens
            ), "the fork's DSpark blocks are uniform"
            q = q.unsqueeze(1)
            if query_len > 1:
                block_table = block_table.repeat_interleave(query_len, dim=0)
                seq_lens = seq_lens.repeat_interleave(query_len)
        else:
            q = self._causal_query(q, attn_metadata)
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = self._backend_kwargs(q)
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = decode.dcp_tot_seq_lens
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
        return self._split_output(kernel_out, return_lse)


class RowMapImpl(_ForkFlashInferMLAImplBase):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl._flattened_decode_metadata as a holder object (DecodeRowMap) applied to all three tensors
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
        q = self._merge_query(q)
        row_map: DecodeRowMap | None = None
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if self._is_multi_token(attn_metadata):
                assert decode.query_start_loc is not None
                row_map = DecodeRowMap.for_rows(
                    decode.query_start_loc, q.shape[0], decode.block_table.shape[0]
                )
        else:
            q = self._causal_query(q, attn_metadata)
        block_table = (
            decode.block_table if row_map is None else row_map.gather(decode.block_table)
        )
        seq_lens = decode.seq_lens if row_map is None else row_map.gather(decode.seq_lens)
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = self._backend_kwargs(q)
        if self.dcp_world_size > 1:
            assert decode.dcp_tot_seq_lens is not None
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=(
                    decode.dcp_tot_seq_lens
                    if row_map is None
                    else row_map.gather(decode.dcp_tot_seq_lens)
                ),
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
        return self._split_output(kernel_out, return_lse)


class CausalOnlyImpl(_ForkFlashInferMLAImplBase):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa (pre-DSpark causal path); non-causal multi-token refused under DCP, per-request tables and bound
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
        if not attn_metadata.causal and self._is_multi_token(attn_metadata):
            raise NotImplementedError(
                "This FlashInfer MLA build does not flatten non-causal blocks."
            )
        q = self._merge_query(q)
        q = (
            q.unsqueeze(1)
            if not attn_metadata.causal
            else self._causal_query(q, attn_metadata)
        )
        self._ensure_scales(layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs = self._backend_kwargs(q)
        if self.dcp_world_size > 1:
            assert decode.dcp_tot_seq_lens is not None
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
            block_tables=decode.block_table,
            seq_lens=decode.seq_lens,
            max_seq_len=attn_metadata.max_seq_len,
            bmm1_scale=self.bmm1_scale,
            bmm2_scale=self.bmm2_scale,
            return_lse=return_lse,
            **extra_kwargs,
        )
        return self._split_output(kernel_out, return_lse)


class NoDcpFlattenImpl(_ForkFlashInferMLAImplBase):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa without DCP; flattened tables, no global bound at all
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert self.dcp_world_size == 1, "use RowReqBoundImpl under DCP"
        decode = attn_metadata.decode
        assert decode is not None
        q = self._merge_query(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if self._is_multi_token(attn_metadata):
                block_table, seq_lens, _ = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
        else:
            q = self._causal_query(q, attn_metadata)
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
            **self._backend_kwargs(q),
        )
        return self._split_output(kernel_out, return_lse)
