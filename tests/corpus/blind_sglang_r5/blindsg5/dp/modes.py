"""Mode-driven draft-extend runners (plan on the plan stream vs in forward)."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner


class DraftPlanMode(enum.Enum):
    PREPLAN = "preplan"  # plan on the plan stream; the forward trusts it
    IN_FORWARD = "in_forward"  # leave planning to ModelRunner.forward


class ModeDrivenDraftExtend:
    def __init__(
        self,
        draft_runner: "ModelRunner",
        plan_mode: DraftPlanMode = DraftPlanMode.PREPLAN,
    ):
        self.draft_runner = draft_runner
        self.plan_mode = plan_mode

    @staticmethod
    def _mode_for(forward_batch: ForwardBatch) -> DraftPlanMode:
        if forward_batch.global_num_tokens_cpu is not None:
            # DP-synchronised: prepare_mlp_sync_batch will pad it.
            return DraftPlanMode.IN_FORWARD
        return DraftPlanMode.PREPLAN

    # expect: SG106
    def forward_draft_extend(self, forward_batch: ForwardBatch):
        if (
            self.plan_mode is DraftPlanMode.PREPLAN
            and not forward_batch.forward_mode.is_idle()
        ):
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output


class DpAwareModeDrivenDraftExtend(ModeDrivenDraftExtend):
    # expect: clean
    def forward_draft_extend(self, forward_batch: ForwardBatch):
        mode = self._mode_for(forward_batch)
        if mode is DraftPlanMode.PREPLAN and not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output


class PlanStreamDraftRunner:
    """Plans on the plan stream; the forward reuses the plan."""

    def __init__(self, draft_runner: "ModelRunner"):
        self.draft_runner = draft_runner
        self._backend = draft_runner.attn_backend
        # Conservative default: never let the forward path re-plan.
        self._replan_after_pad = False

    # expect: SG106
    def run(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self._backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=self._replan_after_pad
            )
        return self.draft_runner.forward(forward_batch)


class ReplannablePlanStreamDraftRunner(PlanStreamDraftRunner):
    """Same plan-stream overlap; the plan is on the runner's own backend, so
    a post-pad re-plan by the forward is equivalent and allowed."""

    def __init__(self, draft_runner: "ModelRunner"):
        super().__init__(draft_runner)
        self._replan_after_pad = True

    # expect: clean
    def run(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self._backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=self._replan_after_pad
            )
        return self.draft_runner.forward(forward_batch)
