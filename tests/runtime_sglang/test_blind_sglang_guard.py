"""The blind SGLang guard sets: scenarios on SGLang 0.5.23's real code written by helpers that never read the guard,
each file labelled `caught` or `passes` (LABELS.md, RUNS.md in each set). Each set runs in one SGLang process with
the guard in raise mode; a scenario is caught when it raises the guard's violation. The floors are the measured
results, so a regression fails; what a set does not decide is said in its RUNS.md."""

from __future__ import annotations

from pathlib import Path

import pytest
from sglang_env import HERE, run_driver
from test_sglang_guard import label


def scenarios(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.py") if not p.name.startswith("_") and p.name != "run_plain.py")


def score(folder: Path) -> tuple[dict, list[str], list[str], list[str]]:
    """(report, caught faults, missed faults, healthy scenarios stopped), every scenario's outcome checked."""
    report = run_driver(scenarios(folder), "raise")
    caught, missed, false_positives = [], [], []
    for path in scenarios(folder):
        outcome = report["results"][path.stem]["outcome"]
        assert outcome in ("caught", "passes"), (path.name, report["results"][path.stem])  # no scenario errors
        if label(path) == "caught":
            (caught if outcome == "caught" else missed).append(path.stem)
        elif outcome == "caught":
            false_positives.append(path.stem)
    assert report["stats"]["guard_errors"] == {}
    return report, caught, missed, false_positives


def test_blind_r1_decision_level_set_under_the_launch_design() -> None:
    """blind_r1 ends its scenarios at the decision, before any attention launch (RUNS.md): under the final design
    none of them runs a kernel on a stale plan, so none is stopped, and none of its healthy batches is."""
    folder = HERE / "blind_r1"
    _, caught, missed, false_positives = score(folder)
    assert len(scenarios(folder)) == 16
    assert caught == [] and len(missed) == 8 and false_positives == []


@pytest.mark.parametrize(("name", "floor", "fp_ceiling"), [("blind_r2", 8, 0)])
def test_blind_launch_level_sets(name, floor, fp_ceiling) -> None:
    _, caught, missed, false_positives = score(HERE / name)
    assert len(caught) >= floor, (caught, missed)
    assert len(false_positives) <= fp_ceiling, false_positives
