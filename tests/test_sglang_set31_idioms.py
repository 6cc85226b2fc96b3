"""What blind SGLang sets 31 and 32 (issue 29) showed SG106 and SG203 getting wrong, written as those sets' forks are,
each checked beside SGLang 0.5.23's real tree with its finding (or its absence, or its listing as not decided):

- a planner function held in a field: a closure a factory of the tree made in `__init__`, a table of partials of a
  planning helper, or a function of the tree stored by its name (SG106 runs it where it is called);
- a target verify planned ahead and made sure of by an `assert`, forwarded on a runner held as a typed parameter or
  on one whose class is not known (the eager runner plans it again);
- a file whose only planning is a helper of another module, but which marks a batch planned (it is read);
- a slice of a launch-read field copied into (`self.seq_lens_k[:bs].copy_(lens)`), the whole lengths its own code
  stores as such (SG203), and a function that leaves the whole lengths there with DCP never asked and nothing of
  its class calling it (listed as not decided, not silent)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.conftest import check_fork_beside_sglang

PLANNER_FACTORY = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def make_planner(attn_backend, *, replan: bool):
    def _planner(forward_batch: ForwardBatch) -> None:
        attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=replan)

    return _planner


class RolloutLoop:
    def __init__(self, runner, attn_backend):
        self.runner = runner
        self._planner = make_planner(attn_backend, replan=REPLAN)

    def step(self, forward_batch: ForwardBatch):
        self._planner(forward_batch)
        return self.runner.forward(forward_batch)
"""


@pytest.mark.parametrize(("replan", "flagged"), [("False", True), ("True", False)], ids=["kept", "replanned"])
def test_a_planner_closure_held_in_a_field_runs_where_called(tmp_path: Path, replan: str, flagged: bool) -> None:
    """Set 31's `RolloutLoop.step` and `ReplanningRolloutLoop.step`."""
    found = check_fork_beside_sglang(tmp_path, {"loops.py": textwrap.dedent(PLANNER_FACTORY).replace("REPLAN", replan)})
    assert [f.code for f in found.findings] == (["SG106"] if flagged else []), found.findings


PLAIN_FUNCTION = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def plan_now(forward_batch: ForwardBatch) -> None:
    forward_batch.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=REPLAN)


class HookedLoop:
    def __init__(self, runner):
        self.runner = runner
        self._plan = plan_now

    def step(self, forward_batch: ForwardBatch):
        self._plan(forward_batch)
        return self.runner.forward(forward_batch)
"""


@pytest.mark.parametrize(("replan", "flagged"), [("False", True), ("True", False)], ids=["kept", "replanned"])
def test_a_planning_function_held_in_a_field_by_its_name_runs_where_called(
    tmp_path: Path, replan: str, flagged: bool
) -> None:
    """A name stored in a field reads like a setting; here it is a function that plans, run where it is called."""
    found = check_fork_beside_sglang(tmp_path, {"loops.py": textwrap.dedent(PLAIN_FUNCTION).replace("REPLAN", replan)})
    assert [f.code for f in found.findings] == (["SG106"] if flagged else []), found.findings


HELPERS = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def plan_and_mark(attn_backend, forward_batch: ForwardBatch, replan_equivalent: bool = False) -> None:
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
"""

TABLE = """
import functools

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

from fork.helpers import plan_and_mark


class ModeMachine:
    def __init__(self, draft_runner, draft_backend):
        self.draft_runner = draft_runner
        self._planners = {
            ForwardMode.TARGET_VERIFY: functools.partial(plan_and_mark, draft_backend),
            ForwardMode.DRAFT_EXTEND_V2: functools.partial(plan_and_mark, draft_backend, replan_equivalent=True),
        }

    def run_draft_extend(self, forward_batch: ForwardBatch):
        self._planners[ForwardMode.KEY](forward_batch)
        forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        return self.draft_runner.forward(forward_batch)

    def run_graph(self, forward_batch: ForwardBatch):
        self.draft_runner.decode_cuda_graph_runner.load_batch(forward_batch)
        forward_batch.mark_forward_metadata_ready()
"""


@pytest.mark.parametrize(("key", "flagged"), [("TARGET_VERIFY", True), ("DRAFT_EXTEND_V2", False)])
def test_a_file_that_marks_and_plans_through_a_table_of_partials_is_read(
    tmp_path: Path, key: str, flagged: bool
) -> None:
    """Set 32's `DraftModeMachine.run_draft_extend` (a verify's planner, whose mark asks for no plan again, on a batch
    the draft forward pads) and `run_draft_extend_widened`: the file names no plan, only the mark."""
    modules = {"helpers.py": HELPERS, "machine.py": textwrap.dedent(TABLE).replace("KEY", key)}
    found = check_fork_beside_sglang(tmp_path, modules)
    assert [(f.code, Path(f.path).name) for f in found.findings] == ([("SG106", "machine.py")] if flagged else [])


VERIFY = """
from typing import Any

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner


class Verifier:
    def __init__(self, runner: ModelRunner):
        self.target_runner = runner

    def verify(self, verify_forward_batch: ForwardBatch):
        assert verify_forward_batch.forward_mode.MODE()
        self.target_runner.attn_backend.init_forward_metadata(verify_forward_batch)
        verify_forward_batch.mark_forward_metadata_ready()
        return self.target_runner.forward(verify_forward_batch)


def run_preplanned(runner: Any, backend: Any, forward_batch: ForwardBatch):
    if not forward_batch.forward_mode.MODE():
        raise ValueError("verify only")
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return runner.forward(forward_batch)
"""


@pytest.mark.parametrize(("mode", "flagged"), [("is_target_verify", 0), ("is_decode", 2)], ids=["verify", "decode"])
def test_a_target_verify_made_sure_of_is_planned_again_by_the_runners_forward(
    tmp_path: Path, mode: str, flagged: int
) -> None:
    """Sets 31 and 32's verifies (`RolloutDraftWorker.score_verify_tree`, `run_preplanned_verify`): on a runner held
    as a `ModelRunner` parameter, or one of no known class called as the model runner's `forward`."""
    found = check_fork_beside_sglang(tmp_path, {"verify.py": textwrap.dedent(VERIFY).replace("MODE", mode)})
    assert [f.code for f in found.findings] == ["SG106"] * flagged, found.findings


BUFFERS = """
import torch

from sglang.srt.runtime_context import get_parallel


class GraphBuffers:
    def __init__(self, max_bs: int):
        self.seq_lens_k = torch.zeros((max_bs,), dtype=torch.int32)
        self.global_seq_lens_k = torch.zeros((max_bs,), dtype=torch.int32)

    def refresh_decode(self, bs: int, seq_lens: torch.Tensor):
        if get_parallel().dcp_enabled:
            self.global_seq_lens_k[:bs].copy_(seq_lens[:bs])
        self.seq_lens_k[:bs].copy_(seq_lens[:bs])

    def refresh_draft_extend(self, bs: int, seq_lens: torch.Tensor):
        self.global_seq_lens_k[:bs].copy_(seq_lens[:bs])
        self.seq_lens_k[:bs].copy_(self.global_seq_lens_k[:bs])
"""


def test_a_slice_of_a_launch_read_field_is_the_field(tmp_path: Path) -> None:
    """Set 31's `MLAGraphReplayBuffers.refresh_decode` (found) and `refresh_draft_extend` (never asks about DCP, and
    nothing calls it: not decided, with why)."""
    found = check_fork_beside_sglang(tmp_path, {"buffers.py": BUFFERS})
    assert [(f.code, f.line) for f in found.findings] == [("SG203", 15)], found.findings
    assert [(j.code, j.scope) for _, j in found.undecided] == [("SG203", "GraphBuffers.refresh_draft_extend")]
