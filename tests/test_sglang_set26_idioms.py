"""A false positive of blind SGLang set 26 (issue 29), written as that set's fork is, its finding (or its absence)
checked (SG106): a worker keeps whether it drafts in several steps in a local, refuses that under DP attention
(`if multi_step and forward_batch.global_num_tokens_cpu is not None: raise ...`), and plans ahead only `if
multi_step:`. Where the refusal was passed with the batch synchronised, the local is false, so no plan is made
ahead of the padding."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.conftest import check_fork_beside_sglang

REFUSING = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class RefusingDraftWorker:
    def draft(self, forward_batch: ForwardBatch):
        multi_step = not forward_batch.forward_mode.is_idle() and self.speculative_num_steps > 1
        if multi_step and REFUSED:
            raise RuntimeError("eager multi-step draft under DP attention is unsupported")
        if multi_step:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch)
"""


@pytest.mark.parametrize(
    ("refused", "flagged"),
    [("forward_batch.global_num_tokens_cpu is not None", False), ("self.strict", True)],
    ids=["refused where the batch is synchronised", "refused on another setting"],
)
def test_a_local_a_refusal_found_false_stays_false(tmp_path: Path, refused: str, flagged: bool) -> None:
    """Set 26's `DpAwareEagleDraftWorker.draft`."""
    found = check_fork_beside_sglang(tmp_path, {"refusing.py": textwrap.dedent(REFUSING).replace("REFUSED", refused)})
    assert [f.code for f in found.findings] == (["SG106"] if flagged else []), found.findings
