"""Standalone-draft forks built on ForkDraftWorkerBase."""

from __future__ import annotations

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

from blindsg22.spec.base_worker import ForkDraftWorkerBase


class ForkStandaloneDraftWorker(ForkDraftWorkerBase):
    """Standalone draft (own embeddings / lm_head), base planning policy."""

    # idiom: sglang/srt/speculative/standalone_worker_v2.py StandaloneDraftWorker (inherits EagleDraftWorker._draft_extend_for_decode eager branch)
    # expect: SG106
    def run_draft_extend(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        self._plan(forward_batch)
        output = self.draft_runner.forward(forward_batch)
        return output.logits_output


class ForkStandaloneReplanDraftWorker(ForkDraftWorkerBase):
    """Standalone draft whose pre-plan may be redone by the forward path."""

    def _after_plan(self, forward_batch: ForwardBatch) -> None:
        # The pre-plan used draft_runner.attn_backend, the forward path's own
        # backend, so a post-pad re-plan is equivalent.
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)

    # idiom: sglang/srt/speculative/standalone_worker_v2.py StandaloneDraftWorker (override of the plan-record hook)
    # expect: clean
    def run_draft_extend(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        self._plan(forward_batch)
        output = self.draft_runner.forward(forward_batch)
        return output.logits_output
