"""Rollout loops with a planner closure bound at construction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner


def make_planner(attn_backend, *, replan: bool) -> Callable[[ForwardBatch], None]:
    def _planner(forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=replan)

    return _planner


class RolloutLoop:
    def __init__(self, runner: "ModelRunner", attn_backend):
        self.runner = runner
        # Multi-step draft wrappers: a forward-path re-plan would clobber them.
        self._planner = make_planner(attn_backend, replan=False)
        self.steps_done = 0

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; planner closure (replan=False) bound in __init__, then draft forward
    # expect: SG106
    def step(self, forward_batch: ForwardBatch):
        self._planner(forward_batch)
        self.steps_done += 1
        return self.runner.forward(forward_batch).logits_output


class ReplanningRolloutLoop:
    def __init__(self, runner: "ModelRunner"):
        self.runner = runner
        self._planner = make_planner(runner.attn_backend, replan=True)
        self.steps_done = 0

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; planner closure (replan=True) bound in __init__, then draft forward
    # expect: clean
    def step(self, forward_batch: ForwardBatch):
        self._planner(forward_batch)
        self.steps_done += 1
        return self.runner.forward(forward_batch).logits_output
