"""Per-forward-mode handler tables used by the platform's step driver."""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Optional

from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

from blindsg28.platform import planning
from blindsg28.platform.planning import graph_can_run, preplan


class ModeHandlerTable:
    def __init__(self, worker: TpModelWorker, draft_backend: Optional[Any] = None):
        self.worker = worker
        self.model_runner = worker.model_runner
        self.draft_backend = draft_backend
        self._handlers: Dict[ForwardMode, Callable[[ForwardBatch], None]] = {
            ForwardMode.DECODE: self._plan_decode,
            ForwardMode.DRAFT_EXTEND_V2: self._plan_draft_extend,
            ForwardMode.EXTEND: self._plan_extend,
        }
        self._post_pad_handlers: Dict[ForwardMode, Callable[[ForwardBatch], None]] = {
            ForwardMode.DECODE: self._pad_then_plan,
            ForwardMode.DRAFT_EXTEND_V2: self._pad_then_plan,
            ForwardMode.EXTEND: self._pad_then_plan,
            ForwardMode.IDLE: self._pad_only,
        }
        self._forward_preplanned = functools.partial(
            self.model_runner.forward, skip_attn_backend_init=True
        )
        self._forward_replanning = functools.partial(
            self.model_runner.forward, skip_attn_backend_init=False
        )
        self._preplan = functools.partial(preplan, self.model_runner.attn_backend)
        self._preplan_replannable = functools.partial(
            preplan, self.model_runner.attn_backend, replan_equivalent=True
        )

    # ---- handlers (pre-pad) ----
    def _plan_decode(self, forward_batch: ForwardBatch) -> None:
        self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    def _plan_draft_extend(self, forward_batch: ForwardBatch) -> None:
        backend = self.draft_backend or self.model_runner.attn_backend
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    def _plan_extend(self, forward_batch: ForwardBatch) -> None:
        self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    # ---- handlers (post-pad) ----
    def _pad_then_plan(self, forward_batch: ForwardBatch) -> None:
        planning.pad_for_dp(forward_batch, self.model_runner)
        self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    def _pad_only(self, forward_batch: ForwardBatch) -> None:
        planning.pad_for_dp(forward_batch, self.model_runner)

    # idiom: eagle_worker_v2.EagleDraftWorker.draft, twist: the plan+mark lives in a dict of per-mode handlers looked up at dispatch time
    # expect: SG106
    def dispatch(self, forward_batch: ForwardBatch):
        handler = self._handlers.get(forward_batch.forward_mode)
        if handler is not None and not graph_can_run(self.model_runner, forward_batch):
            handler(forward_batch)
        return self.model_runner.forward(forward_batch)

    # idiom: eagle_worker_v2.EagleDraftWorker.draft, twist: per-mode handlers that pad first and plan the padded batch, then the eager runner
    # expect: clean
    def dispatch_post_pad(self, forward_batch: ForwardBatch):
        if graph_can_run(self.model_runner, forward_batch):
            return self.model_runner.forward(forward_batch)
        handler = self._post_pad_handlers.get(
            forward_batch.forward_mode, self._pad_then_plan
        )
        handler(forward_batch)
        return planning.run_eager(self.model_runner, forward_batch)

    # idiom: eagle_worker.EAGLEWorker.forward_draft_extend_after_decode (0.5.6: forward(..., skip_attn_backend_init=True)), twist: the flag is baked into a functools.partial stored on self
    # expect: SG106
    def forward_via_partial(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle() or graph_can_run(
            self.model_runner, forward_batch
        ):
            return self.model_runner.forward(forward_batch)
        self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        return self._forward_preplanned(forward_batch)

    # idiom: eagle_worker.EAGLEWorker.forward_draft_extend_after_decode, twist: the stored partial passes skip_attn_backend_init=False, so the batch is never marked
    # expect: clean
    def forward_via_replanning_partial(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle() or graph_can_run(
            self.model_runner, forward_batch
        ):
            return self.model_runner.forward(forward_batch)
        self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        return self._forward_replanning(forward_batch)

    # idiom: tp_worker.TpModelWorker.forward_batch_generation, twist: plan+mark through a functools.partial of planning.preplan stored on self
    # expect: SG106
    def forward_via_plan_partial(self, forward_batch: ForwardBatch):
        if not graph_can_run(self.model_runner, forward_batch):
            self._preplan(forward_batch)
        return self.worker.forward_batch_generation(None, forward_batch)

    # idiom: tp_worker.TpModelWorker.forward_batch_generation, twist: the stored partial of planning.preplan opts into replan_equivalent=True
    # expect: clean
    def dispatch_replannable(self, forward_batch: ForwardBatch):
        if not graph_can_run(self.model_runner, forward_batch):
            self._preplan_replannable(forward_batch)
        return self.worker.forward_batch_generation(None, forward_batch)
