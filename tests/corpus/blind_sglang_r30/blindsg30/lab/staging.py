"""Staged draft runner: build/plan the batch in one method, run it in another."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Tuple

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
)
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg30.utils import plan_helpers as ph

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend


class StagedDraftRunner:
    def __init__(self, draft_runner: ModelRunner):
        self.draft_runner = draft_runner
        self.draft_attn_backend: "AttentionBackend" = draft_runner.attn_backend
        self._staged: Optional[ForwardBatch] = None

    @property
    def staged(self) -> ForwardBatch:
        assert self._staged is not None
        return self._staged

    def _stage(self, forward_batch: ForwardBatch) -> None:
        if not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        self._staged = forward_batch

    def _build(self, batch: ScheduleBatch) -> Tuple[ForwardBatch, bool]:
        fb = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
        )
        if fb.forward_mode.is_idle():
            return fb, False
        self.draft_attn_backend.init_forward_metadata(fb)
        return fb, True

    # idiom: speculative/eagle_worker_v2.py EAGLEWorkerV2.draft; _stage plans+marks and stores self._staged, the forward reads it back through a property
    # expect: SG106
    def step(self, forward_batch: ForwardBatch):
        self._stage(forward_batch)
        return self.draft_runner.forward(self.staged).logits_output

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend; (batch, planned) tuple from _build, mark when planned, then forward
    # expect: SG106
    def step_from_schedule(self, batch: ScheduleBatch):
        fb, planned = self._build(batch)
        if planned:
            fb.mark_forward_metadata_ready()
        return self.draft_runner.forward(fb).logits_output

    # idiom: speculative/eagle_worker_v2.py EAGLEWorkerV2.draft; mark is withdrawn (forward_metadata_ready=False) when the batch carries DP token counts
    # expect: clean
    def step_unmark(self, forward_batch: ForwardBatch):
        self._stage(forward_batch)
        fb = self.staged
        if (
            fb.global_num_tokens_cpu is not None
            or not fb.forward_mode.is_decode()
            or ph.runner_replays(self.draft_runner, fb)
        ):
            fb.forward_metadata_ready = False
        return self.draft_runner.forward(fb).logits_output
