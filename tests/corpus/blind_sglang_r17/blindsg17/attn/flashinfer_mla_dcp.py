"""FlashInfer MLA (``BatchMLAPagedAttentionWrapper``) decode planning with DCP.

The fork replaces the decode indices updater and the decode graph-replay body
to fuse the per-rank index filter into the pack kernel's output.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
)
from sglang.srt.layers.dcp import (
    filter_dcp_local_kv_indices,
    update_local_kv_lens_for_dcp,
)
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    from flashinfer import BatchMLAPagedAttentionWrapper

if TYPE_CHECKING:
    from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
    from sglang.srt.speculative.spec_info import SpecInput

logger = logging.getLogger(__name__)


def _pack_decode_indices(updater, plan, req_pool_indices, kv_lens, kv_indptr, total):
    bs = kv_lens.shape[0]
    kv_indptr[1 : bs + 1] = torch.cumsum(kv_lens, dim=0)
    kv_indices = torch.empty(total, dtype=torch.int32, device=kv_lens.device)
    updater.attn_backend.kv_index_translator.pack_read_stream(
        plan,
        req_pool_indices=req_pool_indices,
        seq_lens=kv_lens,
        indptr=kv_indptr[: bs + 1],
        out=kv_indices,
    )
    return kv_indices


class FusedFilterIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    # expect: SG203
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info: Optional["SpecInput"] = None,
        *,
        plan: "KVLocPlan",
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        if spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(
                wrapper,
                paged_kernel_lens,
                paged_kernel_lens_sum,
                q_indptr,
                kv_indptr,
                init_metadata_replay,
                spec_info,
                plan=plan,
                req_pool_indices=req_pool_indices,
                **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indices = _pack_decode_indices(
            self, plan, req_pool_indices, kv_lens, kv_indptr, paged_kernel_lens_sum
        )
        if get_parallel().dcp_enabled:
            translator = self.attn_backend.kv_index_translator
            kv_indices = translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        wrapper.plan(
            q_indptr[: bs + 1],
            kv_indptr[: bs + 1],
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


class ShardedIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    # expect: clean
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info: Optional["SpecInput"] = None,
        *,
        plan: "KVLocPlan",
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        if spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(
                wrapper,
                paged_kernel_lens,
                paged_kernel_lens_sum,
                q_indptr,
                kv_indptr,
                init_metadata_replay,
                spec_info,
                plan=plan,
                req_pool_indices=req_pool_indices,
                **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indices = _pack_decode_indices(
            self, plan, req_pool_indices, kv_lens, kv_indptr, paged_kernel_lens_sum
        )
        if get_parallel().dcp_enabled:
            n_local = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, {}, bs
            )
            translator = self.attn_backend.kv_index_translator
            if translator.needs_read_translate and n_local > 0:
                valid = kv_indices[:n_local]
                valid.copy_(translator.translate_dcp_read_ids(valid))
        wrapper.plan(
            q_indptr[: bs + 1],
            kv_indptr[: bs + 1],
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


class ReplayFastPlanMLABackend(FlashInferMLAAttnBackend):
    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan: "KVLocPlan",
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional["SpecInput"],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan,
                bs,
                req_pool_indices,
                seq_lens,
                seq_lens_sum,
                forward_mode,
                spec_info,
                seq_lens_cpu,
                in_capture=in_capture,
            )
        assert seq_lens_cpu is not None
        kv_len_arr_cpu = self.fast_plan_kv_len_arr_cpu[:bs]
        kv_len_arr_cpu.copy_(seq_lens_cpu[:bs])
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(
            kv_len_arr_cpu, dim=0
        )
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

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        updater = self.indices_updater_decode
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_indptr = self.kv_indptr
        kv_indices = _pack_decode_indices(
            updater,
            forward_batch.kv_loc_plan,
            forward_batch.req_pool_indices,
            kv_lens,
            kv_indptr,
            forward_batch.seq_lens_sum,
        )
        if get_parallel().dcp_enabled:
            local_kv_lens = kv_lens.clone()
            n_local = plan_dcp_decode_metadata(
                local_kv_lens, kv_indptr, kv_indices, False, {}, bs
            )
            kv_indices = kv_indices[:n_local]
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1],
            kv_indptr[: bs + 1],
            kv_indices,
            kv_lens,
            updater.num_local_heads,
            updater.kv_lora_rank,
            updater.qk_rope_head_dim,
            1,
            False,
            updater.scaling,
            updater.data_type,
            updater.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class HostReplayFastPlanMLABackend(FlashInferMLAAttnBackend):
    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan: "KVLocPlan",
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional["SpecInput"],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan,
                bs,
                req_pool_indices,
                seq_lens,
                seq_lens_sum,
                forward_mode,
                spec_info,
                seq_lens_cpu,
                in_capture=in_capture,
            )
        assert seq_lens_cpu is not None
        kv_len_arr_cpu = self.fast_plan_kv_len_arr_cpu[:bs]
        kv_len_arr_cpu.copy_(seq_lens_cpu[:bs])
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(
            kv_len_arr_cpu, dim=0
        )
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

    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        updater = self.indices_updater_decode
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_indptr = self.kv_indptr
        kv_indices = _pack_decode_indices(
            updater,
            forward_batch.kv_loc_plan,
            forward_batch.req_pool_indices,
            kv_lens,
            kv_indptr,
            forward_batch.seq_lens_sum,
        )
        if get_parallel().dcp_enabled:
            n_local = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, {}, bs
            )
            kv_indices = kv_indices[:n_local]
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1],
            kv_indptr[: bs + 1],
            kv_indices,
            kv_lens,
            updater.num_local_heads,
            updater.kv_lora_rank,
            updater.qk_rope_head_dim,
            1,
            False,
            updater.scaling,
            updater.data_type,
            updater.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class LazyReplanMLABackend(FlashInferMLAAttnBackend):
    """Re-plans the decode wrapper inside forward when the planned batch size
    went stale (mirrors the trtllm_mla backstop)."""

    def _planned_bs(self) -> Optional[int]:
        return getattr(self, "_decode_planned_bs", None)

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_decode_or_idle():
            self._decode_planned_bs = forward_batch.batch_size

    def _replan_decode(self, forward_batch: ForwardBatch, kv_lens: torch.Tensor):
        bs = forward_batch.batch_size
        updater = self.indices_updater_decode
        kv_indices = _pack_decode_indices(
            updater,
            forward_batch.kv_loc_plan,
            forward_batch.req_pool_indices,
            forward_batch.seq_lens[:bs],
            self.kv_indptr,
            forward_batch.seq_lens_sum,
        )
        if get_parallel().dcp_enabled:
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
            self.kv_indptr[1 : bs + 1] = torch.cumsum(kv_lens, dim=0)
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1],
            self.kv_indptr[: bs + 1],
            kv_indices,
            kv_lens,
            updater.num_local_heads,
            updater.kv_lora_rank,
            updater.qk_rope_head_dim,
            1,
            False,
            updater.scaling,
            updater.data_type,
            updater.data_type,
        )
        self._decode_planned_bs = bs
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

    # expect: SG203
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
    ):
        planned_bs = self._planned_bs()
        if planned_bs is not None and planned_bs < forward_batch.batch_size:
            self._replan_decode(
                forward_batch,
                forward_batch.seq_lens[: forward_batch.batch_size].to(torch.int32),
            )
        return super().forward_decode(
            q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )


class LazyReplanMLABackendV2(LazyReplanMLABackend):
    # expect: clean
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
    ):
        planned_bs = self._planned_bs()
        if planned_bs is not None and planned_bs < forward_batch.batch_size:
            kv_lens = forward_batch.seq_lens[: forward_batch.batch_size].to(torch.int32)
            update_local_kv_lens_for_dcp(kv_lens)
            self._replan_decode(forward_batch, kv_lens)
        return super(LazyReplanMLABackend, self).forward_decode(
            q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
