"""Idioms blind SGLang set 42 (`tests/corpus/blind_sglang_r42`, a fork close to SGLang's own workers, runner and
backends, with state kept across methods) showed the evaluation losing, each checked beside SGLang 0.5.23's real
source. Each flagged case was missed on f23fc23, and its twin is the same shape done right."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import check_fork_beside_sglang

STAGED = """
from dataclasses import dataclass
from typing import Optional

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker


@dataclass
class Staged:
    forward_batch: ForwardBatch
    can_run_cuda_graph: bool


class StagedWorker(EagleDraftWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._staged: Optional[Staged] = None

    def stage(self, batch: ScheduleBatch) -> None:
        forward_batch, can_run_graph, _ = prepare_for_draft(
            batch.spec_info, self.req_to_token_pool, batch, self.cuda_graph_runner, self.draft_runner,
            self.topk, self.speculative_num_steps,
        )
        if not can_run_graph and not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(MARK)
        self._staged = Staged(forward_batch=forward_batch, can_run_cuda_graph=can_run_graph)

    def run_staged(self, batch: ScheduleBatch):
        staged = self._staged
        if staged is None:
            self.stage(batch)
            staged = self._staged
        self._staged = None
        if staged.can_run_cuda_graph:
            return self.cuda_graph_runner.execute(staged.forward_batch)
        return self.draft_forward(staged.forward_batch)
"""


@pytest.mark.parametrize(("mark", "flagged"), [("", True), ("replan_equivalent=True", False)])
def test_sg106_a_batch_staged_on_the_instance_where_a_test_chose_to_stage_it(
    tmp_path: Path, mark: str, flagged: bool
) -> None:
    """Set 42's `StagedDraftWorker.run_staged_draft`: where nothing was staged, the method stages the batch itself
    (plans and marks it, keeps it on `self`) and runs what it reads back. Where the two sides of that test met, the
    batch became an unknown, and a forward of an unknown never asked for the paths to be taken one by one."""
    found = check_fork_beside_sglang(tmp_path, {"staged.py": STAGED.replace("MARK", mark)})
    judged = [(f.code, f.symbol) for f in found.findings]
    assert judged == ([("SG106", "StagedWorker.run_staged")] if flagged else [])


CALLABLE_PLANNER = """
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker


class PrePlanner:
    def __init__(self, attn_backend, *, replan_equivalent: bool = False):
        self.attn_backend = attn_backend
        self.replan_equivalent = replan_equivalent

    def __call__(self, forward_batch: ForwardBatch) -> ForwardBatch:
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=self.replan_equivalent)
        return forward_batch


class PlannerWorker(EagleDraftWorker):
    def init_attention_backend(self):
        super().init_attention_backend()
        self._planner = PrePlanner(self.draft_runner.attn_backend, replan_equivalent=REPLAN)

    def draft_extend(self, batch: ScheduleBatch):
        forward_batch = ForwardBatch.init_new(batch, self.draft_runner)
        forward_batch = self._planner(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output
"""


@pytest.mark.parametrize(("replan", "flagged"), [("False", True), ("True", False)])
def test_sg106_an_instance_called_runs_its_classs_call(tmp_path: Path, replan: str, flagged: bool) -> None:
    """Set 42's `BoundPlannerExtendDraftWorker._draft_extend_for_decode`: the planner is an object kept on `self`
    and called (`self._planner(forward_batch)`); calling an instance did not run its class's `__call__`."""
    found = check_fork_beside_sglang(tmp_path, {"planner.py": CALLABLE_PLANNER.replace("REPLAN", replan)})
    assert [(f.code, f.symbol) for f in found.findings] == (
        [("SG106", "PlannerWorker.draft_extend")] if flagged else []
    )
