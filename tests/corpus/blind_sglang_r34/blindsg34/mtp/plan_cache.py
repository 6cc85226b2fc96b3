"""Plans captured on the plan stream, stored, and replayed before the launch."""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

from blindsg34.mtp.draft_runner import MTPDraftRunner
from blindsg34.mtp.planning import PendingPlan


@contextlib.contextmanager
def preplanned(backend: AttentionBackend, forward_batch: ForwardBatch) -> Iterator[ForwardBatch]:
    if not forward_batch.forward_mode.is_idle():
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    yield forward_batch


@contextlib.contextmanager
def padded_and_planned(
    head: MTPDraftRunner, forward_batch: ForwardBatch
) -> Iterator[ForwardBatch]:
    head.pad_for_dp(forward_batch)
    if not forward_batch.forward_mode.is_idle():
        head.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    yield forward_batch


class DraftPlanCache:
    def __init__(self, head: MTPDraftRunner):
        self.head = head
        self._pending: Optional[PendingPlan] = None

    def stage(self, forward_batch: ForwardBatch) -> None:
        """Called on the plan stream while the target verify runs."""
        self._pending = PendingPlan.for_backend(self.head.attn_backend, forward_batch)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (plan captured on the plan stream, replayed later)
    # expect: SG106
    def replay_and_forward(self) -> LogitsProcessorOutput:
        pending, self._pending = self._pending, None
        forward_batch = pending.forward_batch
        if not forward_batch.forward_mode.is_idle():
            pending.run_plan()
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=pending.replan_equivalent
            )
        return self.head.model_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (plan captured on the plan stream, replayed later)
    # expect: clean
    def replay_after_pad(self) -> LogitsProcessorOutput:
        pending, self._pending = self._pending, None
        forward_batch = pending.forward_batch
        self.head.pad_for_dp(forward_batch)
        if not forward_batch.forward_mode.is_idle():
            pending.run_plan()
            forward_batch.mark_forward_metadata_ready()
        out = self.head.execute_eager(forward_batch)
        return self.head._unpad(forward_batch, out)

    # idiom: sglang/srt/speculative/eagle_draft_cuda_graph_runner.py EAGLEDraftCudaGraphRunner capture (with forward_context: plan out-of-forward + mark)
    # expect: SG106
    def forward_in_preplanned_ctx(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        with preplanned(self.head.attn_backend, forward_batch) as planned_batch:
            return self.head.model_runner.forward(planned_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_draft_cuda_graph_runner.py EAGLEDraftCudaGraphRunner capture (with forward_context: plan out-of-forward + mark)
    # expect: clean
    def forward_in_padded_ctx(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        with padded_and_planned(self.head, forward_batch) as planned_batch:
            out = self.head.execute_eager(planned_batch)
        return self.head._unpad(forward_batch, out)
