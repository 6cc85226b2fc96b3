"""Entry points that decide, per deployment, whether a pre-plan is safe.

Each ``plan_and_run_*`` plans the draft batch on the compute stream, records
the plan on the batch, and runs the draft runner's forward. They differ in
how they guard the DP-attention padding that ModelRunner.forward applies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs

    from blindsg31.rollout.protocols import DraftWorkerLike


# idiom: model_executor/model_runner.py _prepare_eager_forward_batch; marks only batches without global_num_tokens (the forward will not pad them)
# expect: clean
def plan_and_run_unpadded(worker: "DraftWorkerLike", forward_batch: ForwardBatch):
    if not forward_batch.forward_mode.is_idle():
        worker.draft_attn_backend.init_forward_metadata(forward_batch)
        if forward_batch.global_num_tokens_cpu is None:
            # No MLP sync: ModelRunner.forward leaves the shapes alone.
            forward_batch.mark_forward_metadata_ready()
    return worker.draft_runner.forward(forward_batch).logits_output


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; refuses decode context parallel, then plans + marks + forwards
# expect: SG106
def plan_and_run_dcp_guarded(worker: "DraftWorkerLike", forward_batch: ForwardBatch):
    if get_parallel().dcp_enabled:
        raise NotImplementedError("pre-planned draft decode does not support DCP")
    if not forward_batch.forward_mode.is_idle():
        worker.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return worker.draft_runner.forward(forward_batch).logits_output


# idiom: speculative/eagle_worker_common.py prepare_for_draft_extend; decode batches opt into re-plan, every other mode keeps the pre-pad plan
# expect: SG106
def plan_and_run_mode_split(worker: "DraftWorkerLike", forward_batch: ForwardBatch):
    if forward_batch.forward_mode.is_idle():
        return worker.draft_runner.forward(forward_batch).logits_output
    worker.draft_runner.attn_backend.init_forward_metadata(forward_batch)
    if forward_batch.forward_mode.is_decode():
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    else:
        forward_batch.mark_forward_metadata_ready()
    return worker.draft_runner.forward(forward_batch).logits_output


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_forward_idle; early return for the empty DP rank only, real batches are pre-planned and marked
# expect: SG106
def plan_and_run_nonidle(worker: "DraftWorkerLike", forward_batch: ForwardBatch):
    if forward_batch.batch_size == 0 or forward_batch.forward_mode.is_idle():
        # Idle DP rank: it still has to enter every collective.
        return worker.draft_runner.forward(forward_batch).logits_output
    worker.draft_attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return worker.draft_runner.forward(forward_batch).logits_output


# idiom: model_executor/forward_batch_info.py mark_forward_metadata_ready; re-plan opt-in keyed on attention TP width instead of attention DP
# expect: SG106
def plan_and_run_attn_tp_gated(worker: "DraftWorkerLike", forward_batch: ForwardBatch):
    if forward_batch.forward_mode.is_idle():
        return worker.draft_runner.forward(forward_batch).logits_output
    parallel = get_parallel()
    worker.draft_runner.attn_backend.init_forward_metadata(forward_batch)
    # attn-TP > 1 pads tokens to a multiple of attn_tp_size; re-plan then.
    forward_batch.mark_forward_metadata_ready(
        replan_equivalent=parallel.attn_tp_size > 1
    )
    return worker.draft_runner.forward(forward_batch).logits_output


class ServerArgsPlanPolicy:
    def __init__(self, server_args: "ServerArgs"):
        self.server_args = server_args

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (DSA note); re-plan disabled exactly when DP attention is on
    # expect: SG106
    def plan_and_run(self, worker: "DraftWorkerLike", forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return worker.draft_runner.forward(forward_batch).logits_output
        # DP-attention deployments run the DSA draft indexer, whose schedule
        # cannot be rebuilt on the forward path: keep the pre-plan there.
        replan = not self.server_args.enable_dp_attention
        worker.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=replan)
        return worker.draft_runner.forward(forward_batch).logits_output

    # idiom: model_executor/forward_batch_info.py needs_forward_metadata_init; re-plan enabled exactly when attention DP can pad
    # expect: clean
    def plan_and_run_dp_replan(self, worker: "DraftWorkerLike", forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return worker.draft_runner.forward(forward_batch).logits_output
        replan = get_parallel().attn_dp_size > 1
        worker.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=replan)
        return worker.draft_runner.forward(forward_batch).logits_output
