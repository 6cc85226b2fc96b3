"""What blind SGLang set 27 (issue 29) showed SG106 getting wrong, written as that set's fork is, each checked beside
SGLang 0.5.23's real tree with its finding (or its absence):

- a target verify planned ahead and handed to the target worker: 0.5.18 and later's eager runner plans a target
  verify again from the padded batch whatever its mark (the pack's `replan_always_when`), so it is not a finding;
  a draft extend handed over the same way is;
- a plan, then a fork's eager helper that pads and plans only where `needs_forward_metadata_init()` says so: the
  paths into the helper (planned ahead or not) are read one by one, not joined;
- a plan made by the `__enter__` of a `with` block's object."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.conftest import check_fork_beside_sglang

HANDED_TO_THE_WORKER = """
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def run_skip_init(target_worker: TpModelWorker, forward_batch: ForwardBatch):
    model_runner = target_worker.model_runner
    graph_runner = model_runner.decode_cuda_graph_runner
    if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
        graph_runner.load_batch(forward_batch)
    elif forward_batch.forward_mode.MODE():
        model_runner.attn_backend.init_forward_metadata(forward_batch)
    return target_worker.forward_batch_generation(
        batch=None, forward_batch=forward_batch, is_verify=True, skip_attn_backend_init=True
    )
"""


@pytest.mark.parametrize(
    ("mode", "flagged"), [("is_target_verify", False), ("is_draft_extend_v2", True)], ids=["verify", "draft extend"]
)
def test_a_target_verify_is_planned_again_by_the_eager_runner(tmp_path: Path, mode: str, flagged: bool) -> None:
    """Set 27's `run_target_verify_skip_init`: planned only where the batch is a target verify."""
    source = textwrap.dedent(HANDED_TO_THE_WORKER).replace("MODE", mode)
    found = check_fork_beside_sglang(tmp_path, {"verify.py": source})
    assert [f.code for f in found.findings] == (["SG106"] if flagged else []), found.findings


EAGER = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def pad_for_dp(model_runner, forward_batch: ForwardBatch) -> bool:
    if forward_batch.global_num_tokens_cpu is None:
        return False
    forward_batch.prepare_mlp_sync_batch(model_runner)
    return True


def forward_padded(model_runner, forward_batch: ForwardBatch):
    pad_for_dp(model_runner, forward_batch)
    if forward_batch.needs_forward_metadata_init() ALWAYS:
        model_runner.attn_backend.init_forward_metadata(forward_batch)
    return model_runner.model.forward(forward_batch.input_ids, forward_batch.positions, forward_batch)
"""

DRIVER = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

from fork.eager import forward_padded


def run_draft_extend(draft_runner, forward_batch: ForwardBatch):
    if not (forward_batch.forward_mode.is_draft_extend_v2() or forward_batch.forward_mode.is_idle()):
        raise ValueError(f"expected a draft extend, got {forward_batch.forward_mode}")
    if not forward_batch.forward_mode.is_idle():
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return forward_padded(draft_runner, forward_batch)
"""


@pytest.mark.parametrize(
    ("always", "flagged"),
    [("", True), ("or forward_batch.forward_mode.is_draft_extend_v2()", False)],
    ids=["plans where the mark says so", "plans a draft extend always"],
)
def test_paths_planned_ahead_or_not_are_read_one_by_one(tmp_path: Path, always: str, flagged: bool) -> None:
    """Set 27's `run_draft_extend_respecting_mark` and `run_draft_extend_always_replan`: an idle batch reaches the
    helper unplanned and is planned there, a draft extend reaches it planned and marked; past the refusal a batch
    that is not idle is a draft extend."""
    files = {"eager.py": textwrap.dedent(EAGER).replace("ALWAYS", always), "driver.py": DRIVER}
    found = check_fork_beside_sglang(tmp_path, files)
    assert [f.code for f in found.findings] == (["SG106"] if flagged else []), found.findings


ENTERED = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class PreplannedBatch:
    def __init__(self, attn_backend, forward_batch: ForwardBatch, *, replan_equivalent: bool = False):
        self.attn_backend = attn_backend
        self.forward_batch = forward_batch
        self.replan_equivalent = replan_equivalent

    def __enter__(self) -> ForwardBatch:
        if not self.forward_batch.forward_mode.is_idle():
            self.attn_backend.init_forward_metadata(self.forward_batch)
            self.forward_batch.mark_forward_metadata_ready(replan_equivalent=self.replan_equivalent)
        return self.forward_batch

    def __exit__(self, exc_type, exc, tb) -> bool:
        return False


def run_draft_extend(draft_runner, forward_batch: ForwardBatch):
    with PreplannedBatch(draft_runner.attn_backend, forward_batch, replan_equivalent=EQUIVALENT) as fb:
        return draft_runner.forward(fb).logits_output
"""


@pytest.mark.parametrize(("equivalent", "flagged"), [("False", True), ("True", False)], ids=["marked", "re-plannable"])
def test_a_plan_made_entering_a_with_block(tmp_path: Path, equivalent: str, flagged: bool) -> None:
    """Set 27's `run_draft_extend_with_context`: the object's `__enter__` plans and marks the batch it returns."""
    found = check_fork_beside_sglang(
        tmp_path, {"context.py": textwrap.dedent(ENTERED).replace("EQUIVALENT", equivalent)}
    )
    assert [f.code for f in found.findings] == (["SG106"] if flagged else []), found.findings
