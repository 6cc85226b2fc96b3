"""What blind SGLang set 33 (issue 29) showed SG106 getting wrong, written as that set's forks are, each checked
beside SGLang 0.5.23's real tree:

- an idle batch made from a scheduler batch whose mode an `assert` made sure of (the eager runner plans a padded idle
  batch again);
- a worker asserted to draft one step, whose step loop breaks before any forward."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import check_fork_beside_sglang

HEADER = """
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
"""

IDLE = """
class BlockDrafter:
    def __init__(self, draft_model_runner: ModelRunner):
        self.draft_model_runner = draft_model_runner

    def propose_block(self, batch: ScheduleBatch) -> None:
        assert batch.forward_mode.MODE()
        forward_batch = ForwardBatch.init_new(batch, self.draft_model_runner)
        self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        self.draft_model_runner.forward(forward_batch)
"""


@pytest.mark.parametrize(("mode", "flagged"), [("is_idle", False), ("is_decode", True)])
def test_an_idle_batch_made_from_a_scheduler_batch_is_planned_again(tmp_path: Path, mode: str, flagged: bool) -> None:
    """Set 33's `BlockDrafter.propose_block_idle` (clean: SGLang's eager runner plans a padded idle batch again,
    and the `assert` on the scheduler batch says what the batch made from it is); a decode batch is not."""
    found = check_fork_beside_sglang(tmp_path, {"block.py": HEADER + IDLE.replace("MODE", mode)})
    assert [f.code for f in found.findings] == (["SG106"] if flagged else []), found.findings


SINGLE_STEP = """
def run_steps(worker, forward_batch: ForwardBatch):
    for i in range(worker.speculative_num_steps):
        if i == worker.speculative_num_steps - 1:
            break
        worker.draft_runner.forward(forward_batch)


class TreeDraftWorker:
    def draft_single_step(self, forward_batch: ForwardBatch):
        assert self.speculative_num_steps == STEPS
        if not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return run_steps(self, forward_batch)
"""


@pytest.mark.parametrize(("steps", "flagged"), [("1", False), ("3", True)])
def test_a_worker_asserted_to_draft_one_step_runs_no_forward(tmp_path: Path, steps: str, flagged: bool) -> None:
    """Set 33's `TreeDraftWorker.draft_single_step` (clean: one step breaks before the forward); three steps run
    two forwards of the batch planned ahead."""
    found = check_fork_beside_sglang(tmp_path, {"tree.py": HEADER + SINGLE_STEP.replace("STEPS", steps)})
    assert [f.code for f in found.findings] == (["SG106"] if flagged else []), found.findings
