"""Draft-extend planning modes, selected per deployment.

"overlap" plans on the plan stream right after batch construction, "lazy"
leaves planning to ModelRunner.forward.
"""

from __future__ import annotations

from typing import Callable, ClassVar, Dict

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker


class DraftExtendPlanners:
    @staticmethod
    def plan_and_mark(attn_backend, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    @staticmethod
    def plan_replannable(attn_backend, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)

    @staticmethod
    def no_plan(attn_backend, forward_batch: ForwardBatch) -> None:
        return None


class RegistryDraftWorker(EagleDraftWorker):
    _EXTEND_PLANNERS: ClassVar[Dict[str, Callable]] = {
        "overlap": DraftExtendPlanners.plan_and_mark,
        "overlap_replan": DraftExtendPlanners.plan_replannable,
        "lazy": DraftExtendPlanners.no_plan,
    }

    @classmethod
    def planner_for(cls, mode: str) -> Callable:
        return cls._EXTEND_PLANNERS[mode]

    # expect: SG106
    def draft_extend_registry(self, forward_batch: ForwardBatch):
        mode = "overlap" if self.plan_stream is not None else "lazy"
        with self.plan_stream_ctx:
            self.planner_for(mode)(self.draft_runner.attn_backend, forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_registry_replannable(self, forward_batch: ForwardBatch):
        mode = "overlap_replan" if self.plan_stream is not None else "lazy"
        with self.plan_stream_ctx:
            self.planner_for(mode)(self.draft_runner.attn_backend, forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output
