"""Small mixins shared by the fork's draft workers."""

from __future__ import annotations

from typing import Optional

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

from blindsg25.workers.draft_extend import DraftExtendWorker


class PrePlanMixin:
    """Owns the draft-extend pre-plan and remembers what it planned."""

    _last_preplanned_bs: Optional[int] = None

    def _preplan(self, forward_batch: ForwardBatch, *, replan_equivalent: bool = False) -> bool:
        if forward_batch.forward_mode.is_idle():
            return False
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
        self._last_preplanned_bs = forward_batch.batch_size
        return True

    def run_draft_extend_preplanned(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (plan via mixin helper)
        # expect: SG106
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        self._preplan(forward_batch)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def run_draft_extend_replannable(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (mixin helper, replan opt-in)
        # expect: clean
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        self._preplan(forward_batch, replan_equivalent=True)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)


class MixinDraftExtendWorker(PrePlanMixin, DraftExtendWorker):
    pass
