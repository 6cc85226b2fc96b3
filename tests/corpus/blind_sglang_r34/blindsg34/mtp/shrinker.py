"""Drops finished requests from a decode batch before the draft step."""

from __future__ import annotations

from typing import List

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
)
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.utils.common import require_mlp_sync


class FinishedRequestShrinker:
    def __init__(self, draft_runner: ModelRunner):
        self.draft_runner = draft_runner

    @staticmethod
    def _keep_indices(batch: ScheduleBatch) -> List[int]:
        return [i for i, req in enumerate(batch.reqs) if not req.finished()]

    def _shrink(self, batch: ScheduleBatch) -> ScheduleBatch:
        keep = self._keep_indices(batch)
        if len(keep) != len(batch.reqs):
            batch.filter_batch(keep_indices=keep)
        return batch

    # idiom: sglang/srt/managers/schedule_batch.py ScheduleBatch.filter_batch + ForwardBatch.init_new (then pre-plan)
    # expect: SG106
    def shrink_and_forward(self, batch: ScheduleBatch) -> LogitsProcessorOutput:
        batch = self._shrink(batch)
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
        )
        if not forward_batch.forward_mode.is_idle():
            # Plan the shrunk shape right away; the batch will not shrink again.
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/managers/schedule_batch.py ScheduleBatch.filter_batch + ForwardBatch.init_new (then pre-plan)
    # expect: clean
    def shrink_and_forward_sync_aware(self, batch: ScheduleBatch) -> LogitsProcessorOutput:
        batch = self._shrink(batch)
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
        )
        if not forward_batch.forward_mode.is_idle() and not require_mlp_sync():
            # Without MLP sync nothing pads this batch after the shrink.
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output
