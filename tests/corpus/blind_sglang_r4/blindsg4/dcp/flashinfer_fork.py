"""FlashInfer-MLA wrapper planning for the fork's DCP decode."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Sequence

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
)
from sglang.srt.layers.dcp import update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.layout import filter_dcp_local_kv_indices, get_dcp_lens
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.runtime_context import get_parallel

if TYPE_CHECKING:
    from flashinfer.mla import BatchMLAPagedAttentionWrapper

    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def _plan(updater, wrapper, qo_indptr, kv_indptr, kv_indices, kv_len_arr):
    wrapper.plan(
        qo_indptr,
        kv_indptr,
        kv_indices,
        kv_len_arr,
        updater.num_local_heads,
        updater.kv_lora_rank,
        updater.qk_rope_head_dim,
        1,
        False,
        updater.scaling,
        updater.data_type,
        updater.data_type,
    )


class DCPDecodeIndicesUpdater(FlashInferMLAIndicesUpdaterDecode):
    """Plans decode wrappers from pre-gathered KV indices (no KVLocPlan)."""

    # expect: SG203
    def plan_gathered(
        self,
        wrapper: "BatchMLAPagedAttentionWrapper",
        seq_lens: torch.Tensor,
        kv_indices: torch.Tensor,
    ):
        bs = len(seq_lens)
        kv_lens = seq_lens.to(torch.int32)
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        if get_parallel().dcp_enabled:
            # keep only this rank's slots (loc % dcp_size == dcp_rank)
            parallel = get_parallel()
            kv_indices = kv_indices[kv_indices % parallel.dcp_size == parallel.dcp_rank]
        _plan(self, wrapper, self.q_indptr[: bs + 1], kv_indptr, kv_indices, kv_lens)

    # expect: clean
    def plan_gathered_sharded(
        self,
        wrapper: "BatchMLAPagedAttentionWrapper",
        seq_lens: torch.Tensor,
        kv_indices: torch.Tensor,
    ):
        bs = len(seq_lens)
        kv_lens = seq_lens.to(torch.int32)
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        if get_parallel().dcp_enabled:
            # rewrites kv_lens / kv_indptr / kv_indices in place
            plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
        _plan(self, wrapper, self.q_indptr[: bs + 1], kv_indptr, kv_indices, kv_lens)


class HostPlanFlashInferMLABackend(FlashInferMLAAttnBackend):
    """Replays decode plans from host-side arrays (no D2H in the hot loop)."""

    def _host_plan_kwargs(self, bs: int, seq_lens_cpu: torch.Tensor) -> dict:
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        kv_indptr_cpu = torch.zeros(bs + 1, dtype=torch.int32)
        kv_indptr_cpu[1:] = torch.cumsum(kv_len_arr_cpu, dim=0)
        return {
            "qo_indptr_cpu": torch.arange(0, bs + 1, dtype=torch.int32),
            "kv_indptr_cpu": kv_indptr_cpu,
            "kv_len_arr_cpu": kv_len_arr_cpu,
        }

    # expect: SG203
    def replay_decode_plan(
        self,
        wrapper: "BatchMLAPagedAttentionWrapper",
        forward_batch: "ForwardBatch",
        kv_indices: torch.Tensor,
    ):
        bs = forward_batch.batch_size
        plan_kwargs = self._host_plan_kwargs(bs, forward_batch.seq_lens_cpu)
        if get_parallel().dcp_enabled:
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
        updater = self.indices_updater_decode
        _plan(
            updater,
            wrapper,
            plan_kwargs["qo_indptr_cpu"],
            plan_kwargs["kv_indptr_cpu"],
            kv_indices,
            plan_kwargs["kv_len_arr_cpu"],
        )

    # expect: clean
    def replay_decode_plan_local(
        self,
        wrapper: "BatchMLAPagedAttentionWrapper",
        forward_batch: "ForwardBatch",
        kv_indices: torch.Tensor,
    ):
        bs = forward_batch.batch_size
        plan_kwargs = self._host_plan_kwargs(bs, forward_batch.seq_lens_cpu)
        update_local_kv_lens_for_dcp(plan_kwargs["kv_len_arr_cpu"])
        plan_kwargs["kv_indptr_cpu"][1:] = torch.cumsum(
            plan_kwargs["kv_len_arr_cpu"], dim=0
        )
        updater = self.indices_updater_decode
        _plan(
            updater,
            wrapper,
            plan_kwargs["qo_indptr_cpu"],
            plan_kwargs["kv_indptr_cpu"],
            kv_indices,
            plan_kwargs["kv_len_arr_cpu"],
        )


# expect: SG203
def plan_draft_steps_dcp(
    updater: FlashInferMLAIndicesUpdaterDecode,
    wrappers: Sequence["BatchMLAPagedAttentionWrapper"],
    forward_batch: "ForwardBatch",
    kv_indices_per_step: List[torch.Tensor],
    num_steps: int,
):
    """Plan one decode wrapper per draft step (topk == 1 chain drafting)."""
    if not get_parallel().dcp_enabled:
        raise ValueError("without DCP use FlashInferMLAMultiStepDraftBackend")
    bs = forward_batch.batch_size
    qo_indptr = updater.q_indptr[: bs + 1]
    for step in range(num_steps):
        step_lens = (forward_batch.seq_lens[:bs] + step + 1).to(torch.int32)
        kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=step_lens.device)
        kv_indptr[1:] = torch.cumsum(step_lens, dim=0)
        _plan(updater, wrappers[step], qo_indptr, kv_indptr, kv_indices_per_step[step], step_lens)


# expect: clean
def plan_draft_steps_dcp_local(
    updater: FlashInferMLAIndicesUpdaterDecode,
    wrappers: Sequence["BatchMLAPagedAttentionWrapper"],
    forward_batch: "ForwardBatch",
    kv_indices_per_step: List[torch.Tensor],
    num_steps: int,
):
    parallel = get_parallel()
    bs = forward_batch.batch_size
    qo_indptr = updater.q_indptr[: bs + 1]
    for step in range(num_steps):
        step_lens = forward_batch.seq_lens[:bs] + step + 1
        step_lens = get_dcp_lens(step_lens, parallel.dcp_size, parallel.dcp_rank).to(
            torch.int32
        )
        kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=step_lens.device)
        kv_indptr[1:] = torch.cumsum(step_lens, dim=0)
        _plan(updater, wrappers[step], qo_indptr, kv_indptr, kv_indices_per_step[step], step_lens)
