"""What blind SGLang set 19 showed (issue 29), each case written as that set's draft-extend runners are, and its
finding (or its absence) checked:
- SG106: a planning helper of another module handed to `functools.partial` and called through it plans; a helper
  object the instance keeps (`self.planner = DraftBatchPlanner(backend)`), whose method plans on the backend it
  holds and marks the batch, plans where the instance calls it; a batch built and planned on one side of a test,
  joined at the merge with the parameter kept on the other, is judged path by path.
The runner's file names a plan itself (`plan_only`), as set 19's did: a file that names no plan, the pack's
re-plan predicate or plan helpers is not read by SG106 at all (a prefilter by the file's own text), so a fork that
plans only through another module's helpers is not yet judged there."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.conftest import check_fork_beside_sglang

PLANNING = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

def plan_and_mark(forward_batch: ForwardBatch, backend, *, replan_equivalent: bool = False) -> ForwardBatch:
    if forward_batch.forward_mode.is_idle():
        return forward_batch
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return forward_batch

class DraftBatchPlanner:
    def __init__(self, backend):
        self.backend = backend
        self.num_plans = 0

    def plan(self, forward_batch: ForwardBatch) -> None:
        self.backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(MARK)
        self.num_plans += 1
"""
RUNNER = """
import functools

from fork.planning import DraftBatchPlanner, plan_and_mark
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

class DraftExtendRunner:
    def __init__(self, worker):
        self.worker = worker
        self.planner = DraftBatchPlanner(worker.draft_runner.attn_backend)

    def run_partial(self, forward_batch: ForwardBatch):
        prepare = functools.partial(plan_and_mark, backend=self.worker.draft_runner.attn_backend, BOUND)
        prepare(forward_batch)
        return self.worker.draft_runner.forward(forward_batch).logits_output

    def run_with_planner(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.planner.plan(forward_batch)
        return self.worker.draft_runner.forward(forward_batch).logits_output

    def plan_only(self, forward_batch: ForwardBatch):
        self.worker.draft_runner.attn_backend.init_forward_metadata(forward_batch)
"""


@pytest.mark.parametrize(
    ("mark", "bound", "flagged"),
    [
        ("", "", ["run_partial", "run_with_planner"]),
        ("replan_equivalent=True", "replan_equivalent=True", []),
    ],
    ids=["marked ready", "marked replannable"],
)
def test_planning_helpers_held_or_bound_plan_where_they_are_called(
    tmp_path: Path, mark: str, bound: str, flagged: list[str]
) -> None:
    """Set 19's `DraftExtendRunner`: a forward after a `partial` of a planning function, or after the planner
    object it keeps, runs a batch planned before the runner padded it, unless the mark lets the runner plan again."""
    modules = {
        "planning.py": textwrap.dedent(PLANNING).replace("MARK", mark),
        "runner.py": textwrap.dedent(RUNNER).replace(", BOUND", f", {bound}" if bound else ""),
    }
    found = check_fork_beside_sglang(tmp_path, modules)
    assert sorted((f.symbol, f.code) for f in found.findings) == [
        (f"DraftExtendRunner.{name}", "SG106") for name in flagged
    ], found.findings


TP_WORKER = """
from typing import Optional

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

class PreplanningTpModelWorker(TpModelWorker):
    def forward_batch_generation(
        self, batch: Optional[ScheduleBatch], forward_batch: Optional[ForwardBatch] = None, **kwargs
    ):
        if batch is not None and batch.forward_mode.is_decode():
            forward_batch = ForwardBatch.init_new(batch, self.model_runner)
            if GUARD:
                self.model_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            batch = None
        return super().forward_batch_generation(batch, forward_batch=forward_batch, **kwargs)
"""


@pytest.mark.parametrize(
    ("guard", "flagged"),
    [("True", True), ("forward_batch.global_num_tokens_cpu is None", False)],
    ids=["any batch", "unsynchronised batches only"],
)
def test_a_batch_built_and_planned_on_one_side_is_judged_where_the_sides_meet(
    tmp_path: Path, guard: str, flagged: bool
) -> None:
    """Set 19's `PreplanningTpModelWorker`: it builds a batch with `ForwardBatch.init_new`, plans and marks it on
    one side of a test, keeps its parameter on the other, and hands whichever it has to SGLang's
    `TpModelWorker.forward_batch_generation`, whose model runner pads it for DP attention. The two batches meet as
    one joined object, which has no plan: the function is then judged path by path."""
    found = check_fork_beside_sglang(tmp_path, {"worker.py": textwrap.dedent(TP_WORKER).replace("GUARD", guard)})
    expected = [("PreplanningTpModelWorker.forward_batch_generation", "SG106")] if flagged else []
    assert [(f.symbol, f.code) for f in found.findings] == expected, found.findings
