"""What blind SGLang set 29 (issue 29) showed SG106 getting wrong, written as that set's fork is, each checked beside
SGLang 0.5.23's real tree with its finding (or its absence):

- a target verify planned ahead on a batch made from the scheduler's (`ForwardBatch.init_new(batch, ...)` takes
  its mode, the pack's `copied_fields`): the eager runner plans it again, so it is not a finding;
- a worker that picks one of its own methods into a local and calls it: the finding is the method's, not its;
- a forward chosen on a path (`partial(runner.forward, skip_attn_backend_init=True)`, else `runner.forward`);
- plans made in a list comprehension over micro-batches."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.conftest import check_fork_beside_sglang

VERIFY = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class Verifier:
    def verify(self, batch):
        if not batch.forward_mode.MODE():
            return self.target_worker.forward_batch_generation(batch)
        forward_batch = ForwardBatch.init_new(batch, self.model_runner)
        self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.target_worker.forward_batch_generation(None, forward_batch=forward_batch, is_verify=True)
"""


@pytest.mark.parametrize(
    ("mode", "flagged"), [("is_target_verify", False), ("is_decode", True)], ids=["verify", "decode"]
)
def test_a_batch_made_from_the_schedulers_takes_its_mode(tmp_path: Path, mode: str, flagged: bool) -> None:
    """Set 29's `LookaheadVerifierWorker._verify_preplanned`."""
    found = check_fork_beside_sglang(tmp_path, {"verify.py": textwrap.dedent(VERIFY).replace("MODE", mode)})
    assert [f.code for f in found.findings] == (["SG106"] if flagged else []), found.findings


CHOSEN = """
import functools

from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class Worker:
    def dispatch(self, forward_batch: ForwardBatch):
        run = self._preplanned if self.preplan else self._plain
        return run(forward_batch)

    def _preplanned(self, forward_batch: ForwardBatch):
        self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.model_runner.forward(forward_batch)

    def _plain(self, forward_batch: ForwardBatch):
        return self.model_runner.forward(forward_batch)

    def draft_extend(self, forward_batch: ForwardBatch):
        run = functools.partial(self.draft_runner.forward, skip_attn_backend_init=True)
        if forward_batch.forward_mode.is_idle():
            run = self.draft_runner.forward
        else:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        return run(forward_batch)
"""


def test_a_method_picked_into_a_local_and_a_forward_chosen_on_a_path(tmp_path: Path) -> None:
    """Set 29's `LookaheadVerifierWorker.forward_batch_generation` (clean: `_plain_decode_preplanned` is the one
    at fault) and `HardenedStandaloneDraftWorker._draft_extend_partial`."""
    source = textwrap.dedent(CHOSEN)
    found = check_fork_beside_sglang(tmp_path, {"worker.py": source})
    lines = source.splitlines()
    preplanned_forward = lines.index("        return self.model_runner.forward(forward_batch)") + 1
    chosen_forward = len(lines)  # `draft_extend`'s `return run(forward_batch)`, not `dispatch`'s
    assert sorted((f.code, f.line) for f in found.findings) == [
        ("SG106", preplanned_forward),
        ("SG106", chosen_forward),
    ], found.findings


MICRO = """
from typing import Iterable

from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def preplan(attn_backend, forward_batch: ForwardBatch) -> ForwardBatch:
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=EQUIVALENT)
    return forward_batch


def run_micro_batches(model_runner, forward_batches: Iterable[ForwardBatch]):
    planned = [preplan(model_runner.attn_backend, fb) for fb in forward_batches]
    return [model_runner.forward(fb).logits_output for fb in planned]
"""


@pytest.mark.parametrize(("equivalent", "flagged"), [("False", True), ("True", False)], ids=["marked", "re-plannable"])
def test_plans_made_in_a_comprehension(tmp_path: Path, equivalent: str, flagged: bool) -> None:
    """Set 29's `run_microbatches_preplanned`: what the comprehension's calls did to each batch stays done."""
    found = check_fork_beside_sglang(tmp_path, {"micro.py": textwrap.dedent(MICRO).replace("EQUIVALENT", equivalent)})
    assert [f.code for f in found.findings] == (["SG106"] if flagged else []), found.findings
