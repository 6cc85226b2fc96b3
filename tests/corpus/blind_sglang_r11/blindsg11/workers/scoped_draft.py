"""Draft extend with the KV-canary probe.

The probe inspects the draft backend's planned metadata (kv indptr / page
table) before the forward writes the new KV rows.
"""

from __future__ import annotations

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

from blindsg11.runtime.plan_helpers import preplanned, scoped_preplan


class CanaryProbedDraftWorker(EagleDraftWorker):
    def _probe_planned_metadata(self, forward_batch: ForwardBatch) -> None:
        meta = getattr(self.draft_runner.attn_backend, "forward_metadata", None)
        if meta is None:
            return
        canary = self.draft_runner.canary_manager
        if canary is not None and hasattr(canary, "probe_metadata"):
            canary.probe_metadata(meta, forward_batch.batch_size)

    # expect: SG106
    def draft_extend_in_scope(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        with preplanned(self.draft_runner.attn_backend, forward_batch):
            self._probe_planned_metadata(forward_batch)
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        return logits_output

    # expect: clean
    def draft_extend_after_scope(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            with scoped_preplan(self.draft_runner.attn_backend, forward_batch):
                self._probe_planned_metadata(forward_batch)
        # Outside the scope the batch is unmarked again: the runner plans the
        # batch it actually runs (padded, under DP attention).
        return self.draft_runner.forward(forward_batch).logits_output
