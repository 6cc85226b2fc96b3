"""Fork variants of the FlashInfer MLA backend's decode planning.

``BatchMLAPagedAttentionWrapper.plan`` takes ``kv_len_arr``; under DCP the
decode page table lists only this rank's pages, so the planned lengths must
be this rank's share (``plan_dcp_decode_metadata`` rewrites them in place).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
)
from sglang.srt.layers.dcp.layout import (
    filter_dcp_local_kv_indices,
    update_local_kv_lens_for_dcp,
)
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel

if TYPE_CHECKING:
    from flashinfer import BatchMLAPagedAttentionWrapper

    from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.spec_info import SpecInput


class ScratchLensMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Eager decode planner that keeps the per-request lengths it planned
    (read by the fork's KV-usage metrics)."""

    last_kv_lens: Optional[torch.Tensor] = None

    # expect: SG203
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info: Optional[SpecInput] = None,
        *,
        plan: KVLocPlan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        if spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info,
                plan=plan, req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(
            paged_kernel_lens_sum, dtype=torch.int32, device=kv_indptr.device
        )
        translator = self.attn_backend.kv_index_translator
        is_translated = translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        n_ids = paged_kernel_lens_sum
        if get_parallel().dcp_enabled:
            # The planner rewrites the lengths it is handed; give it scratch so
            # the metrics keep the per-request lengths.
            n_ids = plan_dcp_decode_metadata(
                kv_lens.clone(), kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
        if not is_translated and n_ids > 0 and translator.needs_read_translate:
            valid = kv_indices[:n_ids]
            valid.copy_(translator.translate_dcp_read_ids(valid))
        self.last_kv_lens = kv_lens
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


class InPlaceLensMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """ScratchLensMLAIndicesUpdaterDecode recording the lengths actually planned."""

    last_kv_lens: Optional[torch.Tensor] = None

    # expect: clean
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info: Optional[SpecInput] = None,
        *,
        plan: KVLocPlan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        if spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info,
                plan=plan, req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(
            paged_kernel_lens_sum, dtype=torch.int32, device=kv_indptr.device
        )
        translator = self.attn_backend.kv_index_translator
        is_translated = translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        n_ids = paged_kernel_lens_sum
        if get_parallel().dcp_enabled:
            # kv_lens / kv_indptr become this rank's share in place.
            n_ids = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
        if not is_translated and n_ids > 0 and translator.needs_read_translate:
            valid = kv_indices[:n_ids]
            valid.copy_(translator.translate_dcp_read_ids(valid))
        self.last_kv_lens = kv_lens
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


class DraftBranchMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Draft-decode planning from the branch indptr the draft kernel wrote."""

    # expect: SG203
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info: Optional[SpecInput] = None,
        *,
        plan: KVLocPlan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        if spec_info is None:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info,
                plan=plan, req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        branch_indptr, branch_indices = spec_info.kv_indptr, spec_info.kv_indices
        # Each branch spans its prefix plus one slot per finished draft step;
        # FlashInfer >= 0.7 wants kv_len_arr to agree with the indptr.
        branch_lens = (branch_indptr[1:] - branch_indptr[:-1]).to(torch.int32)
        if init_metadata_replay:
            wrapper.plan(
                fast_decode_kwargs["qo_indptr_cpu"],
                fast_decode_kwargs["kv_indptr_cpu"],
                branch_indices,
                fast_decode_kwargs["kv_len_arr_cpu"],
                self.num_local_heads,
                self.kv_lora_rank,
                self.qk_rope_head_dim,
                1,
                False,
                self.scaling,
                self.data_type,
                self.data_type,
            )
            return
        wrapper.plan(
            q_indptr,
            branch_indptr,
            branch_indices,
            branch_lens,
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.scaling,
            self.data_type,
            self.data_type,
        )


class DirectPlanFlashInferMLABackend(FlashInferMLAAttnBackend):
    """Eager decode planned inline (skips the indices-updater indirection)."""

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(seq_lens, dim=0)
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum, dtype=torch.int32, device=seq_lens.device
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=seq_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        if get_parallel().dcp_enabled:
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        updater = self.indices_updater_decode
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            seq_lens.to(torch.int32),
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


class SingleRankDirectPlanFlashInferMLABackend(FlashInferMLAAttnBackend):
    """DirectPlanFlashInferMLABackend restricted to single-rank KV."""

    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if (
            get_parallel().dcp_enabled
            or not forward_batch.forward_mode.is_decode_or_idle()
        ):
            # DCP decode shards the table and lengths in the updater.
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(seq_lens, dim=0)
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum, dtype=torch.int32, device=seq_lens.device
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=seq_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        updater = self.indices_updater_decode
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            seq_lens.to(torch.int32),
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


class HostMirrorReplayFlashInferMLABackend(FlashInferMLAAttnBackend):
    """Decode graph replay that tolerates batches without a host seq_lens mirror."""

    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan: KVLocPlan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional[SpecInput],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum,
                forward_mode, spec_info, seq_lens_cpu, in_capture=in_capture,
            )
        if seq_lens_cpu is None:
            # Overlap-scheduler batches arrive device-only; one D2H per replay.
            seq_lens_cpu = seq_lens[:bs].cpu()
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        self.indices_updater_decode.update(
            seq_lens[:bs],
            seq_lens_sum,
            decode_wrapper=self.decode_cuda_graph_metadata[bs],
            init_metadata_replay=True,
            spec_info=spec_info,
            req_pool_indices=req_pool_indices[:bs],
            plan=plan,
            qo_indptr_cpu=self.cuda_graph_qo_indptr_cpu[: bs + 1],
            kv_indptr_cpu=self.cuda_graph_kv_indptr_cpu[: bs + 1],
            kv_len_arr_cpu=kv_len_arr_cpu,
            kv_indices=self.cuda_graph_kv_indices,
        )


class HostMirrorLocalReplayFlashInferMLABackend(FlashInferMLAAttnBackend):
    """HostMirrorReplayFlashInferMLABackend with the DCP share applied."""

    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan: KVLocPlan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional[SpecInput],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum,
                forward_mode, spec_info, seq_lens_cpu, in_capture=in_capture,
            )
        if seq_lens_cpu is None:
            seq_lens_cpu = seq_lens[:bs].cpu()
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        self.indices_updater_decode.update(
            seq_lens[:bs],
            seq_lens_sum,
            decode_wrapper=self.decode_cuda_graph_metadata[bs],
            init_metadata_replay=True,
            spec_info=spec_info,
            req_pool_indices=req_pool_indices[:bs],
            plan=plan,
            qo_indptr_cpu=self.cuda_graph_qo_indptr_cpu[: bs + 1],
            kv_indptr_cpu=self.cuda_graph_kv_indptr_cpu[: bs + 1],
            kv_len_arr_cpu=kv_len_arr_cpu,
            kv_indices=self.cuda_graph_kv_indices,
        )


class KwargsReplayFlashInferMLABackend(FlashInferMLAAttnBackend):
    """Decode replay keeping the fast-plan kwargs on the backend between steps."""

    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan: KVLocPlan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional[SpecInput],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum,
                forward_mode, spec_info, seq_lens_cpu, in_capture=in_capture,
            )
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        local_kv_len_cpu = kv_len_arr_cpu.clone()
        update_local_kv_lens_for_dcp(local_kv_len_cpu)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(
            local_kv_len_cpu, dim=0
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


class KwargsLocalReplayFlashInferMLABackend(FlashInferMLAAttnBackend):
    """KwargsReplayFlashInferMLABackend publishing the rank-local lengths."""

    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan: KVLocPlan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional[SpecInput],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum,
                forward_mode, spec_info, seq_lens_cpu, in_capture=in_capture,
            )
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        local_kv_len_cpu = kv_len_arr_cpu.clone()
        update_local_kv_lens_for_dcp(local_kv_len_cpu)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(
            local_kv_len_cpu, dim=0
        )
        self.fast_decode_kwargs.update(
            {
                "qo_indptr_cpu": self.cuda_graph_qo_indptr_cpu[: bs + 1],
                "kv_indptr_cpu": self.cuda_graph_kv_indptr_cpu[: bs + 1],
                "kv_len_arr_cpu": local_kv_len_cpu,
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


class ScratchLensFlashInferMLAAttnBackend(FlashInferMLAAttnBackend):
    """Installs ScratchLensMLAIndicesUpdaterDecode for eager decode."""

    def __init__(self, model_runner: ModelRunner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.indices_updater_decode = ScratchLensMLAIndicesUpdaterDecode(
            model_runner, self
        )


class InPlaceLensFlashInferMLAAttnBackend(FlashInferMLAAttnBackend):
    def __init__(self, model_runner: ModelRunner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.indices_updater_decode = InPlaceLensMLAIndicesUpdaterDecode(
            model_runner, self
        )


class DraftBranchFlashInferMLAAttnBackend(FlashInferMLAAttnBackend):
    def __init__(self, model_runner: ModelRunner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.indices_updater_decode = DraftBranchMLAIndicesUpdaterDecode(
            model_runner, self
        )
