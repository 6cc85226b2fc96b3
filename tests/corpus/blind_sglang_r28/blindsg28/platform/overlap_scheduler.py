"""Overlap scheduler: launches step N while step N+1 is being prepared."""

from __future__ import annotations

import logging
from collections import deque
from typing import Deque, List, Optional

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)

from blindsg28.platform import planning
from blindsg28.platform.step_context import StepContext, make_step_context

logger = logging.getLogger(__name__)


class OverlapScheduler:
    def __init__(
        self,
        target_worker: TpModelWorker,
        draft_worker: Optional[TpModelWorker] = None,
    ):
        self.target_worker = target_worker
        self.draft_worker = draft_worker
        self.inflight: Deque[StepContext] = deque()
        self.steps_launched = 0

    def _build_draft_extend_batch(self, batch: ScheduleBatch) -> ForwardBatch:
        batch.forward_mode = (
            ForwardMode.IDLE
            if batch.forward_mode.is_idle()
            else ForwardMode.DRAFT_EXTEND_V2
        )
        return ForwardBatch.init_new(
            batch,
            self.draft_worker.model_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )

    # idiom: eagle_worker_common.prepare_for_draft_extend (plans DRAFT_EXTEND_V2 pre-pad and marks it), twist: forward goes through TpModelWorker.forward_batch_generation
    # expect: SG106
    def run_draft_extend(self, batch: ScheduleBatch):
        forward_batch = self._build_draft_extend_batch(batch)
        if not forward_batch.forward_mode.is_idle():
            draft_runner = self.draft_worker.model_runner
            draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        result = self.draft_worker.forward_batch_generation(None, forward_batch)
        self.steps_launched += 1
        return result

    # idiom: eagle_worker_common.prepare_for_draft_extend, twist: the pre-plan opts into the post-pad re-plan with the runner's own backend
    # expect: clean
    def run_draft_extend_replannable(self, batch: ScheduleBatch):
        forward_batch = self._build_draft_extend_batch(batch)
        if not forward_batch.forward_mode.is_idle():
            draft_runner = self.draft_worker.model_runner
            draft_runner.attn_backend.init_forward_metadata(forward_batch)
            # Same backend object the eager forward re-plans with, no view ctx.
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        result = self.draft_worker.forward_batch_generation(None, forward_batch)
        self.steps_launched += 1
        return result

    # idiom: eagle_worker_v2.EagleDraftWorker.draft, twist: state carried on a StepContext and the plan done by planning.preplan in another module
    # expect: SG106
    def launch_step(self, ctx: StepContext):
        fb = ctx.forward_batch
        if not ctx.use_graph:
            ctx.planned = planning.preplan(ctx.attn_backend, fb)
        out = ctx.runner.forward(fb)
        ctx.step_id += 1
        self.steps_launched += 1
        return out

    # idiom: eagle_worker_v2.EagleDraftWorker.draft, twist: StepContext whose plan happens after the forward's own padding, then the eager runner
    # expect: clean
    def launch_step_post_pad(self, ctx: StepContext):
        fb = ctx.forward_batch
        if ctx.use_graph:
            return ctx.runner.forward(fb)
        planning.pad_for_dp(fb, ctx.runner)
        if not fb.forward_mode.is_idle():
            ctx.runner.attn_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()
            ctx.planned = True
        out = planning.run_eager(ctx.runner, fb)
        ctx.step_id += 1
        return out

    # idiom: tp_worker.TpModelWorker.forward_batch_generation for an eager decode step, twist: idle / graph early return, the mark goes through the deprecated-flag mapper
    # expect: SG106
    def run_step_or_idle(self, ctx: StepContext):
        fb = ctx.forward_batch
        if fb.forward_mode.is_idle() or ctx.use_graph:
            return ctx.runner.forward(fb)
        ctx.attn_backend.init_forward_metadata(fb)
        # the decode plan is reused; the batch is padded for DP afterwards
        fb.apply_deprecated_skip_attn_backend_init(True)
        ctx.planned = True
        return ctx.runner.forward(fb)

    # idiom: scheduler overlap loop around TpModelWorker.forward_batch_generation, twist: the next step's ForwardBatch is built while the previous is in flight, no pre-plan
    # expect: clean
    def run_overlapped(self, batches: List[ScheduleBatch]):
        results = []
        runner = self.target_worker.model_runner
        pending: Optional[StepContext] = None
        for i, batch in enumerate(batches):
            fb = ForwardBatch.init_new(
                batch, runner, return_hidden_states_before_norm=False
            )
            ctx = make_step_context(runner, fb, step_id=i)
            if pending is not None:
                results.append(pending.runner.forward(pending.forward_batch))
            pending = ctx
        if pending is not None:
            results.append(pending.runner.forward(pending.forward_batch))
        return results
