# SPDX-License-Identifier: Apache-2.0
"""FlashInfer MLA decode impls for non-causal (DSpark) draft blocks under DCP."""

from __future__ import annotations

from typing import Any

import torch

from vllm.logger import init_logger
from vllm.v1.attention.backend import AttentionLayer
from vllm.v1.attention.backends.mla.flashinfer_mla import (
    FlashInferMLADecodeMetadata,
    FlashInferMLAMetadata,
)

from blindobj4.mla_base import RowDecodeFlashInferMLAImpl
from blindobj4.mla_rows import (
    expand_all_per_row,
    expand_per_row,
    ragged_row_map,
    uniform_query_len,
)

logger = init_logger(__name__)


def _is_multi_token(attn_metadata: FlashInferMLAMetadata) -> bool:
    assert attn_metadata.decode is not None
    return (
        attn_metadata.decode.max_query_len > 1
        or attn_metadata.num_decode_tokens > attn_metadata.num_decodes
    )


class RepeatRowsFlashInferMLAImpl(RowDecodeFlashInferMLAImpl):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        decode = attn_metadata.decode
        block_table = decode.block_table
        seq_lens = decode.seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if _is_multi_token(attn_metadata):
                q_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
                block_table = block_table.repeat_interleave(q_len, dim=0)
                seq_lens = seq_lens.repeat_interleave(q_len)
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])

        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            assert decode.dcp_tot_seq_lens is not None
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
                backend="cute-dsl",
            )
        return self._run_trtllm_decode(
            q, kv_c_and_k_pe_cache, block_table, seq_lens, attn_metadata, layer,
            extra_kwargs,
        )


class ConsistentRowsFlashInferMLAImpl(RowDecodeFlashInferMLAImpl):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        decode = attn_metadata.decode
        block_table = decode.block_table
        seq_lens = decode.seq_lens
        global_seq_lens = decode.dcp_tot_seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if _is_multi_token(attn_metadata):
                q_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
                block_table = block_table.repeat_interleave(q_len, dim=0)
                seq_lens = seq_lens.repeat_interleave(q_len)
                if global_seq_lens is not None:
                    global_seq_lens = global_seq_lens.repeat_interleave(q_len)
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])

        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            assert global_seq_lens is not None
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=global_seq_lens,
                backend="cute-dsl",
            )
        return self._run_trtllm_decode(
            q, kv_c_and_k_pe_cache, block_table, seq_lens, attn_metadata, layer,
            extra_kwargs,
        )


class TiledGlobalFlashInferMLAImpl(RowDecodeFlashInferMLAImpl):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        decode = attn_metadata.decode
        block_table = decode.block_table
        seq_lens = decode.seq_lens
        global_seq_lens = decode.dcp_tot_seq_lens
        if not attn_metadata.causal and _is_multi_token(attn_metadata):
            q = q.unsqueeze(1)
            q_len = uniform_query_len(
                attn_metadata.num_decode_tokens, attn_metadata.num_decodes
            )
            block_table = block_table.repeat_interleave(q_len, dim=0)
            seq_lens = seq_lens.repeat_interleave(q_len)
            if global_seq_lens is not None:
                global_seq_lens = global_seq_lens.repeat(q_len)
        elif not attn_metadata.causal:
            q = q.unsqueeze(1)
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])

        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            assert global_seq_lens is not None
            extra_kwargs = self._dcp_launch_kwargs(global_seq_lens)
        return self._run_trtllm_decode(
            q, kv_c_and_k_pe_cache, block_table, seq_lens, attn_metadata, layer,
            extra_kwargs,
        )


class RaggedRowsFlashInferMLAImpl(RowDecodeFlashInferMLAImpl):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl._flattened_decode_metadata
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        decode = attn_metadata.decode
        block_table = decode.block_table
        seq_lens = decode.seq_lens
        global_seq_lens = decode.dcp_tot_seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if _is_multi_token(attn_metadata):
                assert decode.query_start_loc is not None
                row_req = ragged_row_map(
                    decode.query_start_loc, attn_metadata.num_decodes
                )
                block_table = block_table[row_req]
                seq_lens = seq_lens[row_req]
                if global_seq_lens is not None:
                    q_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
                    global_seq_lens = global_seq_lens.repeat_interleave(q_len)
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])

        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            assert global_seq_lens is not None
            extra_kwargs = self._dcp_launch_kwargs(global_seq_lens)
        return self._run_trtllm_decode(
            q, kv_c_and_k_pe_cache, block_table, seq_lens, attn_metadata, layer,
            extra_kwargs,
        )


class SearchsortedRowsFlashInferMLAImpl(RowDecodeFlashInferMLAImpl):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl._flattened_decode_metadata
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        decode = attn_metadata.decode
        block_table = decode.block_table
        seq_lens = decode.seq_lens
        global_seq_lens = decode.dcp_tot_seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if _is_multi_token(attn_metadata):
                cu = decode.query_start_loc
                assert cu is not None
                rows = torch.arange(q.shape[0], device=cu.device, dtype=cu.dtype)
                row_req = torch.searchsorted(cu[1:], rows, right=True).clamp_(
                    max=block_table.shape[0] - 1
                )
                block_table = block_table[row_req]
                seq_lens = seq_lens[row_req]
                if global_seq_lens is not None:
                    global_seq_lens = global_seq_lens[row_req]
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])

        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            assert global_seq_lens is not None
            extra_kwargs = self._dcp_launch_kwargs(global_seq_lens)
        return self._run_trtllm_decode(
            q, kv_c_and_k_pe_cache, block_table, seq_lens, attn_metadata, layer,
            extra_kwargs,
        )


class CachedRowsFlashInferMLAImpl(RowDecodeFlashInferMLAImpl):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rows_block_table: torch.Tensor | None = None
        self._rows_seq_lens: torch.Tensor | None = None
        self._rows_for: int = 0

    def _expand_rows(self, decode: FlashInferMLADecodeMetadata, num_rows: int) -> None:
        if self._rows_for == num_rows and self._rows_block_table is not None:
            return
        q_len = num_rows // decode.block_table.shape[0]
        self._rows_block_table = decode.block_table.repeat_interleave(q_len, dim=0)
        self._rows_seq_lens = decode.seq_lens.repeat_interleave(q_len)
        self._rows_for = num_rows

    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        decode = attn_metadata.decode
        block_table = decode.block_table
        seq_lens = decode.seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if _is_multi_token(attn_metadata):
                self._expand_rows(decode, q.shape[0])
                assert self._rows_block_table is not None
                assert self._rows_seq_lens is not None
                block_table = self._rows_block_table
                seq_lens = self._rows_seq_lens
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])

        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            assert decode.dcp_tot_seq_lens is not None
            extra_kwargs = self._dcp_launch_kwargs(decode.dcp_tot_seq_lens)
        return self._run_trtllm_decode(
            q, kv_c_and_k_pe_cache, block_table, seq_lens, attn_metadata, layer,
            extra_kwargs,
        )


class HelperRowsFlashInferMLAImpl(RowDecodeFlashInferMLAImpl):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        decode = attn_metadata.decode
        block_table = decode.block_table
        seq_lens = decode.seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if _is_multi_token(attn_metadata):
                q_len = uniform_query_len(
                    attn_metadata.num_decode_tokens, attn_metadata.num_decodes
                )
                block_table, seq_lens = expand_per_row(block_table, seq_lens, q_len)
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])

        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            dcp_kwargs = dict(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
            )
            extra_kwargs.update(dcp_kwargs)
            extra_kwargs["backend"] = "cute-dsl"
        return self._run_trtllm_decode(
            q, kv_c_and_k_pe_cache, block_table, seq_lens, attn_metadata, layer,
            extra_kwargs,
        )


class HelperAllRowsFlashInferMLAImpl(RowDecodeFlashInferMLAImpl):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        decode = attn_metadata.decode
        block_table = decode.block_table
        seq_lens = decode.seq_lens
        global_seq_lens = decode.dcp_tot_seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if _is_multi_token(attn_metadata):
                q_len = uniform_query_len(
                    attn_metadata.num_decode_tokens, attn_metadata.num_decodes
                )
                block_table, seq_lens, global_seq_lens = expand_all_per_row(
                    block_table, seq_lens, global_seq_lens, q_len
                )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])

        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            dcp_kwargs = dict(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=global_seq_lens,
            )
            extra_kwargs.update(dcp_kwargs)
            extra_kwargs["backend"] = "cute-dsl"
        return self._run_trtllm_decode(
            q, kv_c_and_k_pe_cache, block_table, seq_lens, attn_metadata, layer,
            extra_kwargs,
        )


class StatefulDCPFlashInferMLAImpl(RowDecodeFlashInferMLAImpl):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._current_decode: FlashInferMLADecodeMetadata | None = None

    @property
    def _dcp_kwargs(self) -> dict[str, Any]:
        decode = self._current_decode
        assert decode is not None and decode.dcp_tot_seq_lens is not None
        return self._dcp_launch_kwargs(decode.dcp_tot_seq_lens)

    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        decode = attn_metadata.decode
        self._current_decode = decode
        block_table = decode.block_table
        seq_lens = decode.seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if _is_multi_token(attn_metadata):
                q_len = q.shape[0] // attn_metadata.num_decodes
                decode.flattened_block_table = block_table.repeat_interleave(
                    q_len, dim=0
                )
                decode.flattened_seq_lens = seq_lens.repeat_interleave(q_len)
                decode.query_len = q.shape[0]
                block_table = decode.flattened_block_table
                seq_lens = decode.flattened_seq_lens
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])

        extra_kwargs = self._dcp_kwargs if self.dcp_world_size > 1 else {}
        return self._run_trtllm_decode(
            q, kv_c_and_k_pe_cache, block_table, seq_lens, attn_metadata, layer,
            extra_kwargs,
        )


class StatefulRowsDCPFlashInferMLAImpl(RowDecodeFlashInferMLAImpl):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._current_global: torch.Tensor | None = None

    @property
    def _dcp_kwargs(self) -> dict[str, Any]:
        assert self._current_global is not None
        return self._dcp_launch_kwargs(self._current_global)

    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        decode = attn_metadata.decode
        block_table = decode.block_table
        seq_lens = decode.seq_lens
        self._current_global = decode.dcp_tot_seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if _is_multi_token(attn_metadata):
                q_len = q.shape[0] // attn_metadata.num_decodes
                block_table = block_table.repeat_interleave(q_len, dim=0)
                seq_lens = seq_lens.repeat_interleave(q_len)
                if self._current_global is not None:
                    self._current_global = self._current_global.repeat_interleave(
                        q_len
                    )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])

        extra_kwargs = self._dcp_kwargs if self.dcp_world_size > 1 else {}
        return self._run_trtllm_decode(
            q, kv_c_and_k_pe_cache, block_table, seq_lens, attn_metadata, layer,
            extra_kwargs,
        )


class LocalOnlyRowsFlashInferMLAImpl(RowDecodeFlashInferMLAImpl):
    # idiom: vllm/v1/attention/backends/mla/triton_mla.py TritonMLAImpl.forward_mqa (non-causal repeat_interleave)
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        assert self.dcp_world_size == 1, (
            f"{type(self).__name__} does not support decode context parallelism"
        )
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        decode = attn_metadata.decode
        block_table = decode.block_table
        seq_lens = decode.seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if _is_multi_token(attn_metadata):
                q_len = q.shape[0] // attn_metadata.num_decodes
                block_table, seq_lens = expand_per_row(block_table, seq_lens, q_len)
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        return self._run_trtllm_decode(
            q, kv_c_and_k_pe_cache, block_table, seq_lens, attn_metadata, layer, {}
        )


class CausalDCPFlashInferMLAImpl(RowDecodeFlashInferMLAImpl):
    # idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa (causal DCP branch)
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        if not attn_metadata.causal:
            raise NotImplementedError(
                f"{type(self).__name__} only serves causal decode batches"
            )
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        decode = attn_metadata.decode
        q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            assert decode.dcp_tot_seq_lens is not None
            extra_kwargs = self._dcp_launch_kwargs(decode.dcp_tot_seq_lens)
        return self._run_trtllm_decode(
            q,
            kv_c_and_k_pe_cache,
            decode.block_table,
            decode.seq_lens,
            attn_metadata,
            layer,
            extra_kwargs,
        )
