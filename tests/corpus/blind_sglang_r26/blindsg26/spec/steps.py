"""Single draft-side forwards (draft-extend / draft-prefill) for the fork's
EAGLE workers, with per-mode planning."""

from __future__ import annotations

import logging
from typing import Callable, Dict, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

from blindsg26.common.planning import PlannedForward
from blindsg26.common.settings import DraftStepSettings

logger = logging.getLogger(__name__)


class DraftStepRunner:
    """Runs one draft-side forward on ``draft_worker.draft_runner``."""

    def __init__(self, draft_worker, settings: Optional[DraftStepSettings] = None):
        self.worker = draft_worker
        self.runner = draft_worker.draft_runner
        self.settings = settings or DraftStepSettings.from_server_args(
            draft_worker.server_args
        )
        self._planners: Dict[ForwardMode, Callable[[ForwardBatch], None]] = {
            ForwardMode.DRAFT_EXTEND_V2: self._plan_draft_extend,
            ForwardMode.EXTEND: self._plan_draft_prefill,
            ForwardMode.IDLE: self._plan_nothing,
        }

    def _plan_draft_extend(self, forward_batch: ForwardBatch) -> None:
        self.runner.attn_backend.init_forward_metadata(forward_batch)

    def _plan_draft_prefill(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.seq_lens_cpu is not None:
            forward_batch.seq_lens_sum = int(forward_batch.seq_lens_cpu.sum())
        self.runner.attn_backend.init_forward_metadata(forward_batch)

    def _plan_nothing(self, forward_batch: ForwardBatch) -> None:
        return None

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (planner chosen from a dict keyed by ForwardMode, then mark)
    # expect: SG106
    def run(self, forward_batch: ForwardBatch):
        planner = self._planners.get(forward_batch.forward_mode, self._plan_nothing)
        planner(forward_batch)
        if not forward_batch.forward_mode.is_idle():
            forward_batch.mark_forward_metadata_ready()
        return self.runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/model_executor/forward_batch_info.py mark_forward_metadata_ready(replan_equivalent=True) after a ForwardMode-keyed planner
    # expect: clean
    def run_replannable(self, forward_batch: ForwardBatch):
        planner = self._planners.get(forward_batch.forward_mode, self._plan_nothing)
        planner(forward_batch)
        if not forward_batch.forward_mode.is_idle():
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill with a pre-plan (forward through a lambda)
    # expect: SG106
    def run_prefill_extend(self, forward_batch: ForwardBatch):
        forward = lambda fb: self.runner.forward(fb).logits_output  # noqa: E731
        if forward_batch.forward_mode.is_idle():
            return forward(forward_batch)
        self._plan_draft_prefill(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return forward(forward_batch)

    # idiom: sglang/srt/speculative/dflash_info.py DFlashVerifyInput.prepare_for_verify (defer planning when DP padding will run; predicate in a lambda)
    # expect: clean
    def run_prefill_extend_dp_aware(self, forward_batch: ForwardBatch):
        runner_pads = lambda fb: fb.global_num_tokens_cpu is not None  # noqa: E731
        if not forward_batch.forward_mode.is_idle() and not runner_pads(forward_batch):
            self._plan_draft_prefill(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend via common.planning.PlannedForward.plan (classmethod factory) + run
    # expect: SG106
    def run_planned(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.runner.forward(forward_batch).logits_output
        step = PlannedForward.plan(self.runner, forward_batch)
        return step.run().logits_output

    # idiom: common.planning.PlannedForward.plan(..., replan_equivalent=True) (classmethod factory) + run
    # expect: clean
    def run_planned_replannable(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.runner.forward(forward_batch).logits_output
        step = PlannedForward.plan(self.runner, forward_batch, replan_equivalent=True)
        return step.run().logits_output
