"""What blind SGLang set 35 (issue 29) showed SG106 getting wrong, written as that set's forks are, each checked
beside SGLang 0.5.23's real tree: an object of the fork's own class that another keeps from its constructor's
annotated parameter (a "draft session" holding its strategy) runs its methods where it is called, so the forward
the strategy runs is the one that pads the batch the session planned."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import check_fork_beside_sglang

STRATEGY = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class BaseDraftStrategy:
    def _forward_draft_steps(self, forward_batch: ForwardBatch):
        for step in range(self.speculative_num_steps - 1):
            self.draft_runner.forward(forward_batch)
"""

SESSION = """
from typing import TYPE_CHECKING

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

if TYPE_CHECKING:
    from fork.strategy import BaseDraftStrategy


class DraftSession:
    def __init__(self, strategy: "BaseDraftStrategy"):
        self.strategy = strategy

    def run_draft_steps(self, forward_batch: ForwardBatch):
        s = self.strategy
        if not forward_batch.forward_mode.is_idle():
            s.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(MARK)
        return s._forward_draft_steps(forward_batch)
"""


@pytest.mark.parametrize(("mark", "flagged"), [("", True), ("replan_equivalent=True", False)])
def test_a_strategy_kept_by_a_session_runs_its_forward(tmp_path: Path, mark: str, flagged: bool) -> None:
    """Set 35's `DraftSession.run_draft_steps` (the session plans and marks the batch, the strategy it keeps runs
    the draft steps' forwards, which pad it) and a twin marked so that a padded batch is planned again."""
    found = check_fork_beside_sglang(tmp_path, {"strategy.py": STRATEGY, "session.py": SESSION.replace("MARK", mark)})
    assert [(f.code, f.symbol) for f in found.findings] == (
        [("SG106", "DraftSession.run_draft_steps")] if flagged else []
    ), found.findings
