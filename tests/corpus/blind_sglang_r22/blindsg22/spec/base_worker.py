"""Base class for the fork's draft workers: one place that plans attention."""

from __future__ import annotations

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker


class ForkDraftWorkerBase(StandaloneDraftWorker):
    """Draft worker whose eager paths plan through ``_plan``.

    Subclasses decide, through ``_after_plan``, how the plan is recorded on
    the batch.
    """

    draft_runner: ModelRunner

    def _after_plan(self, forward_batch: ForwardBatch) -> None:
        # Default: the plan is final, the forward must not plan again.
        forward_batch.mark_forward_metadata_ready()

    def _plan(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        self._after_plan(forward_batch)
