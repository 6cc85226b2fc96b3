"""A small state machine over forward modes for one MTP iteration:

    DECODE (draft) -> TARGET_VERIFY -> DRAFT_EXTEND_V2 -> DECODE ...
    IDLE at any point on a DP rank with no requests.

Each phase owns how its batch is planned; the planners are kept in a dict
keyed by forward mode.
"""

from __future__ import annotations

import enum
import functools
import logging
from typing import Any, Callable, Dict, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

from blindsg32.mtp.contexts import draft_backend_scope, step_timer
from blindsg32.mtp.plan_utils import logits_of, plan_and_mark

logger = logging.getLogger(__name__)


class Phase(enum.Enum):
    DRAFT = "draft"
    VERIFY = "verify"
    EXTEND = "extend"
    IDLE = "idle"


_NEXT_PHASE = {
    Phase.DRAFT: Phase.VERIFY,
    Phase.VERIFY: Phase.EXTEND,
    Phase.EXTEND: Phase.DRAFT,
    Phase.IDLE: Phase.IDLE,
}


class DraftModeMachine:
    def __init__(self, draft_runner: Any, target_runner: Any, draft_backend: Any):
        self.draft_runner = draft_runner
        self.target_runner = target_runner
        self.draft_backend = draft_backend
        self.phase = Phase.DRAFT
        self.stats: Dict[str, float] = {}
        self._planners: Dict[ForwardMode, Callable[[ForwardBatch], ForwardBatch]] = {
            ForwardMode.DECODE: functools.partial(plan_and_mark, draft_backend),
            ForwardMode.TARGET_VERIFY: functools.partial(
                plan_and_mark, target_runner.attn_backend
            ),
            ForwardMode.DRAFT_EXTEND_V2: functools.partial(
                plan_and_mark, draft_runner.attn_backend, replan_equivalent=True
            ),
        }

    @classmethod
    def for_worker(cls, worker: Any) -> "DraftModeMachine":
        return cls(
            worker.draft_runner,
            worker.target_worker.model_runner,
            worker.draft_attn_backend,
        )

    def _transition(self, forward_batch: ForwardBatch) -> Phase:
        if forward_batch.forward_mode.is_idle():
            self.phase = Phase.IDLE
        else:
            self.phase = _NEXT_PHASE[self.phase]
        return self.phase

    def advance(self, forward_batch: ForwardBatch) -> Any:
        handlers = {
            Phase.DRAFT: self.run_draft_decode,
            Phase.VERIFY: self.run_verify,
            Phase.EXTEND: self.run_draft_extend_widened,
            Phase.IDLE: self.run_idle,
        }
        out = handlers[self.phase](forward_batch)
        self._transition(forward_batch)
        return out

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; DECODE phase plans+marks via the mode-keyed planner dict (partial(plan_and_mark)) and runs the draft runner
    # expect: SG106
    def run_draft_decode(self, forward_batch: ForwardBatch) -> Any:
        assert forward_batch.forward_mode == ForwardMode.DECODE
        planner = self._planners[forward_batch.forward_mode]
        planner(forward_batch)
        with step_timer(self.stats, "draft"), draft_backend_scope(
            self.draft_backend, forward_batch
        ):
            return logits_of(self.draft_runner.forward(forward_batch))

    # idiom: speculative/eagle_worker_common.py run_eagle_verify; VERIFY phase plans+marks the TARGET_VERIFY batch from the dict, target runner re-plans eager verify anyway
    # expect: clean
    def run_verify(self, forward_batch: ForwardBatch) -> Any:
        assert forward_batch.forward_mode.is_target_verify()
        self._planners[ForwardMode.TARGET_VERIFY](forward_batch)
        with step_timer(self.stats, "verify"):
            return logits_of(self.target_runner.forward(forward_batch))

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend reusing the verify batch; plans+marks while labelled TARGET_VERIFY, then relabels DRAFT_EXTEND_V2 before the draft forward
    # expect: SG106
    def run_draft_extend(self, forward_batch: ForwardBatch) -> Any:
        # The verify batch already has the draft-extend geometry (one row per
        # draft token); plan it once, then hand it to the draft runner.
        self._planners[ForwardMode.TARGET_VERIFY](forward_batch)
        forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        with step_timer(self.stats, "extend"):
            return logits_of(self.draft_runner.forward(forward_batch))

    def run_idle(self, forward_batch: ForwardBatch) -> Any:
        # Idle ranks still enter every collective; nothing to plan here.
        with step_timer(self.stats, "idle"):
            return logits_of(self.draft_runner.forward(forward_batch))

    # idiom: speculative/multi_layer_eagle_worker_v2.py _draft_extend_for_decode (widened window); DRAFT_EXTEND_V2 planner from the dict marks replan_equivalent=True before the forward
    # expect: clean
    def run_draft_extend_widened(self, forward_batch: ForwardBatch) -> Any:
        if forward_batch.forward_mode.is_idle():
            return self.run_idle(forward_batch)
        forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        self._planners[ForwardMode.DRAFT_EXTEND_V2](forward_batch)
        with step_timer(self.stats, "extend"):
            return logits_of(self.draft_runner.forward(forward_batch))

    # idiom: speculative/eagle_utils.py eagle_prepare_for_verify (graph branch); plans via decode_cuda_graph_runner.load_batch and marks only when the graph will replay, forward takes the graph path
    # expect: clean
    def run_draft_decode_graph(self, forward_batch: ForwardBatch) -> Any:
        graph = self.draft_runner.decode_cuda_graph_runner
        can_run_graph = bool(graph is not None and graph.can_run_graph(forward_batch))
        if can_run_graph:
            graph.load_batch(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        with draft_backend_scope(self.draft_backend, forward_batch):
            return logits_of(self.draft_runner.forward(forward_batch))
