"""FlashInfer-MLA backend overrides (BatchMLAPagedAttentionWrapper planning)
for decode context parallelism."""

from __future__ import annotations

import functools
import logging
from typing import Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    fast_mla_decode_plan,
)
from sglang.srt.layers.dcp.layout import filter_dcp_local_kv_indices, get_dcp_lens
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel

from blindsg8.attn.dcp_lens import (
    dcp_dense_block_table,
    dcp_group,
    kernel_kv_lens,
    localize_kv_len_arr_,
    rank_local_lens,
)

logger = logging.getLogger(__name__)


class _EagerDecodePlanMixin(FlashInferMLAAttnBackend):
    def _pack_decode_indices(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(seq_lens, dim=0)
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum, dtype=torch.int32, device=seq_lens.device
        )
        is_translated = self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=seq_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        return bs, seq_lens, kv_indptr, kv_indices, is_translated

    def _shard_indices(self, kv_indices, is_translated):
        kv_indices = filter_dcp_local_kv_indices(kv_indices)
        translator = self.kv_index_translator
        if not is_translated and translator.needs_read_translate:
            kv_indices = translator.translate_dcp_read_ids(kv_indices)
        return kv_indices

    def _plan_decode(self, bs, kv_indptr, kv_indices, kv_len_arr):
        upd = self.indices_updater_decode
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            kv_len_arr,
            upd.num_local_heads,
            upd.kv_lora_rank,
            upd.qk_rope_head_dim,
            1,
            False,
            upd.scaling,
            upd.data_type,
            upd.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class FilteredFlashInferMLABackend(_EagerDecodePlanMixin):
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        bs, seq_lens, kv_indptr, kv_indices, is_translated = (
            self._pack_decode_indices(forward_batch)
        )
        kv_len_arr = seq_lens.to(torch.int32)
        if get_parallel().dcp_enabled:
            localize_kv_len_arr_(kv_len_arr)
            kv_indices = self._shard_indices(kv_indices, is_translated)
        self._plan_decode(bs, kv_indptr, kv_indices, kv_len_arr)


class LocalIndptrFlashInferMLABackend(_EagerDecodePlanMixin):
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        bs, seq_lens, kv_indptr, kv_indices, is_translated = (
            self._pack_decode_indices(forward_batch)
        )
        kv_len_arr = seq_lens.to(torch.int32)
        if get_parallel().dcp_enabled:
            localize_kv_len_arr_(kv_len_arr)
            # The indptr must index the compacted (rank-local) index stream.
            kv_indptr[1 : bs + 1] = torch.cumsum(kv_len_arr, dim=0)
            kv_indices = self._shard_indices(kv_indices, is_translated)
        self._plan_decode(bs, kv_indptr, kv_indices, kv_len_arr)


class NoLocalizeFlashInferMLABackend(FlashInferMLAAttnBackend):
    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info,
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture,
            )
        assert seq_lens_cpu is not None
        # plan_dcp_decode_metadata shards the lengths inside the indices
        # updater, so hand it the batch lengths as-is.
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        self.fast_decode_kwargs.update(
            {
                "qo_indptr_cpu": self.cuda_graph_qo_indptr_cpu[: bs + 1],
                "kv_indptr_cpu": self.cuda_graph_kv_indptr_cpu[: bs + 1],
                "kv_len_arr_cpu": kv_len_arr_cpu,
            }
        )
        self.indices_updater_decode.update(
            seq_lens[:bs],
            seq_lens_sum,
            decode_wrapper=self.decode_cuda_graph_metadata[bs],
            init_metadata_replay=True,
            spec_info=spec_info,
            req_pool_indices=req_pool_indices[:bs],
            plan=plan,
            **self.fast_decode_kwargs,
        )


class LocalizeFlashInferMLABackend(FlashInferMLAAttnBackend):
    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info,
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture,
            )
        assert seq_lens_cpu is not None
        # The replay plan reads these host arrays verbatim; shard them here.
        kv_len_arr_cpu = localize_kv_len_arr_(seq_lens_cpu[:bs].to(torch.int32))
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        self.fast_decode_kwargs.update(
            {
                "qo_indptr_cpu": self.cuda_graph_qo_indptr_cpu[: bs + 1],
                "kv_indptr_cpu": self.cuda_graph_kv_indptr_cpu[: bs + 1],
                "kv_len_arr_cpu": kv_len_arr_cpu,
            }
        )
        self.indices_updater_decode.update(
            seq_lens[:bs],
            seq_lens_sum,
            decode_wrapper=self.decode_cuda_graph_metadata[bs],
            init_metadata_replay=True,
            spec_info=spec_info,
            req_pool_indices=req_pool_indices[:bs],
            plan=plan,
            **self.fast_decode_kwargs,
        )


class _FastReplanMixin(FlashInferMLAAttnBackend):
    """Host-only replan of a captured decode wrapper (the device kv indices
    were already written, sharded, into the capture-stable buffer by the
    indices updater on the previous replay-prep)."""

    def _fast_plan_fn(self, bs: int):
        return functools.partial(fast_mla_decode_plan, self.decode_cuda_graph_metadata[bs])

    def _run_fast_plan(self, bs, kv_len_arr_cpu):
        upd = self.indices_updater_decode
        kv_indptr_cpu = self.cuda_graph_kv_indptr_cpu[: bs + 1]
        kv_indptr_cpu[1:] = torch.cumsum(kv_len_arr_cpu, dim=0)
        plan_fn = self._fast_plan_fn(bs)
        plan_fn(
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            kv_indptr_cpu,
            self.cuda_graph_kv_indices,
            kv_len_arr_cpu,
            upd.num_local_heads,
            upd.kv_lora_rank,
            upd.qk_rope_head_dim,
            1,
            False,
            upd.scaling,
            upd.data_type,
            upd.data_type,
        )


class FastReplanFlashInferMLABackend(_FastReplanMixin):
    # expect: SG203
    def replan_decode_graph(self, bs: int, seq_lens_cpu: torch.Tensor) -> None:
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        self._run_fast_plan(bs, kv_len_arr_cpu)


class FastReplanLocalFlashInferMLABackend(_FastReplanMixin):
    # expect: clean
    def replan_decode_graph(self, bs: int, seq_lens_cpu: torch.Tensor) -> None:
        dcp_size, dcp_rank = dcp_group()
        kv_len_arr_cpu = get_dcp_lens(seq_lens_cpu[:bs], dcp_size, dcp_rank).to(
            torch.int32
        )
        self._run_fast_plan(bs, kv_len_arr_cpu)


class DenseTableFlashInferMLABackend(FlashInferMLAAttnBackend):
    """Plans the decode wrapper through the dense page-table form (cuTile /
    CUTLASS MLA) instead of the CSR index stream."""

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        upd = self.indices_updater_decode
        bs = forward_batch.batch_size
        # Fixed full-context width keeps the table shape stable across steps.
        block_tables = dcp_dense_block_table(
            self.req_to_token_pool.req_to_token,
            forward_batch.req_pool_indices[:bs],
            self.max_context_len,
        )
        plan_kwargs = dict(
            cum_seq_lens_q=self.q_indptr_decode[: bs + 1],
            block_tables=block_tables,
            seq_lens=kernel_kv_lens(forward_batch),
            num_heads=upd.num_local_heads,
            head_dim_ckv=upd.kv_lora_rank,
            head_dim_kpe=upd.qk_rope_head_dim,
            page_size=1,
            causal=False,
            sm_scale=upd.scaling,
            q_data_type=upd.data_type,
            kv_data_type=upd.data_type,
        )
        self.decode_wrapper.plan(**plan_kwargs)
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class DenseTableLocalFlashInferMLABackend(FlashInferMLAAttnBackend):
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        upd = self.indices_updater_decode
        bs = forward_batch.batch_size
        # Fixed full-context width keeps the table shape stable across steps.
        block_tables = dcp_dense_block_table(
            self.req_to_token_pool.req_to_token,
            forward_batch.req_pool_indices[:bs],
            self.max_context_len,
        )
        plan_kwargs = dict(
            cum_seq_lens_q=self.q_indptr_decode[: bs + 1],
            block_tables=block_tables,
            seq_lens=rank_local_lens(kernel_kv_lens(forward_batch)),
            num_heads=upd.num_local_heads,
            head_dim_ckv=upd.kv_lora_rank,
            head_dim_kpe=upd.qk_rope_head_dim,
            page_size=1,
            causal=False,
            sm_scale=upd.scaling,
            q_data_type=upd.data_type,
            kv_data_type=upd.data_type,
        )
        self.decode_wrapper.plan(**plan_kwargs)
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class _OccupancyUpdaterMixin(FlashInferMLAIndicesUpdaterDecode):
    last_kv_lens: Optional[torch.Tensor] = None

    def _record_kv_occupancy(self, kv_lens: torch.Tensor) -> None:
        # Whole-sequence lengths for the KV-occupancy metric.
        self.last_kv_lens = kv_lens.clone()

    def _translate_prefix(self, kv_indices, n_kernel_ids, is_translated):
        translator = self.attn_backend.kv_index_translator
        if not is_translated and n_kernel_ids > 0 and translator.needs_read_translate:
            valid = kv_indices[:n_kernel_ids]
            valid.copy_(translator.translate_dcp_read_ids(valid))


class StatsIndicesUpdaterDecode(_OccupancyUpdaterMixin):
    # expect: SG203
    def call_begin_forward(
        self,
        wrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info=None,
        *,
        plan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        if spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info, plan=plan,
                req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        is_translated = self.attn_backend.kv_index_translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        n_kernel_ids = paged_kernel_lens_sum
        if get_parallel().dcp_enabled:
            # Shard copies: kv_lens stays whole-sequence for the metric below
            # and kv_indptr is the backend's shared buffer.
            n_kernel_ids = plan_dcp_decode_metadata(
                kv_lens.clone(),
                kv_indptr.clone(),
                kv_indices,
                False,
                fast_decode_kwargs,
                bs,
            )
        self._record_kv_occupancy(kv_lens)
        self._translate_prefix(kv_indices, n_kernel_ids, is_translated)
        wrapper.plan(
            q_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.scaling,
            self.data_type,
            self.data_type,
        )


class ShardedIndicesUpdaterDecode(_OccupancyUpdaterMixin):
    # expect: clean
    def call_begin_forward(
        self,
        wrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info=None,
        *,
        plan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        if spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info, plan=plan,
                req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        # Record before sharding: the metric wants whole-sequence lengths.
        self._record_kv_occupancy(kv_lens)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        is_translated = self.attn_backend.kv_index_translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        n_kernel_ids = paged_kernel_lens_sum
        if get_parallel().dcp_enabled:
            # Rewrites kv_lens / kv_indptr to this rank's share in place.
            n_kernel_ids = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
        self._translate_prefix(kv_indices, n_kernel_ids, is_translated)
        wrapper.plan(
            q_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.scaling,
            self.data_type,
            self.data_type,
        )


class OccupancyFlashInferMLABackend(FlashInferMLAAttnBackend):
    def __init__(self, model_runner, skip_prefill=False, kv_indptr_buf=None, q_indptr_decode_buf=None):
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)
        self.indices_updater_decode = ShardedIndicesUpdaterDecode(model_runner, self)
