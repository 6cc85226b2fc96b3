"""Draft-extend mixins for the fork's EAGLE-family workers.

Mixed in front of an upstream draft worker (``EagleDraftWorker``,
``StandaloneDraftWorker``); they rely on ``self.draft_runner``.
"""

from __future__ import annotations

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker


class DraftExtendPrePlanMixin:
    """Plans the eager draft-extend batch before handing it to the runner."""

    # expect: SG106
    def run_draft_extend(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        out = self.draft_runner.forward(forward_batch)
        return out.logits_output


class DraftExtendReplanMixin:
    """Like :class:`DraftExtendPrePlanMixin`, but lets the runner re-plan after
    the MLP-sync padding reshapes the batch."""

    # expect: clean
    def run_draft_extend(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        out = self.draft_runner.forward(forward_batch)
        return out.logits_output


class PrePlannedEagleDraftWorker(DraftExtendPrePlanMixin, EagleDraftWorker):
    pass


class PrePlannedStandaloneDraftWorker(DraftExtendPrePlanMixin, StandaloneDraftWorker):
    pass


class ReplanningStandaloneDraftWorker(DraftExtendReplanMixin, StandaloneDraftWorker):
    pass
