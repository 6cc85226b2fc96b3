"""Blind config sets 1-6 (`tests/corpus/blind_config_r1` to `_r6`, issue 30): 69, 69, 82, 85, 74 and 16 serving configs,
written by someone who never read specguard, each labelled with what vLLM's real code does (`hazard`, `refused` by
vLLM itself, or `clean`), on real releases and forks of them. Run with `--strict` as an operator's CI gate would: a
hazard or a refusal judged clean (exit 0) is a silent miss. The numbers are floors no change may fall below; each
set's RUNS.md has each run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.deploy.sg_mutate import fork, replace, rewrite

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
# set -> (refusals judged clean at most, clean configs with a hazard at most, hazards found at least)
FLOORS = {
    "blind_config_r1": (4, 2, 21),
    "blind_config_r2": (3, 1, 21),
    "blind_config_r3": (4, 4, 24),
    "blind_config_r4": (9, 11, 21),
    "blind_config_r5": (0, 10, 27),
    "blind_config_r6": (0, 2, 6),
}


@pytest.mark.parametrize("folder", list(FLOORS))
def test_no_hazard_is_judged_clean(run_config, source_dir, tmp_path: Path, folder: str) -> None:  # type: ignore[no-untyped-def]
    silent_refusals, false_alarms, found = FLOORS[folder]
    outcomes: dict[str, list[str]] = {}
    cases = json.loads((CORPUS / folder / "cases.json").read_text())
    # a release's cases one after another, forks last: the source facts of a tree are kept for a few trees per
    # process (`deploy.facts._facts_for`), so cases in the file's order parsed each release again and again
    for case in sorted(cases, key=lambda case: (bool(case["fork"]), case["version"])):
        tree = source_dir(case["version"])
        if case["fork"]:
            tree = fork(tree, tmp_path / case["id"])
            for edit in case["fork"]:
                rewrite(tree, edit["file"], replace(edit["old"], edit["new"]))
        argv = ["--vllm-source", str(tree), "--strict"]
        argv += [f"--env={k}={v}" for k, v in case["env"].items()]
        if case["yaml"]:
            (tmp_path / f"{case['id']}.yaml").write_text(case["yaml"])
            argv.append(str(tmp_path / f"{case['id']}.yaml"))
        rc, out, err = run_config(*argv, "--", *case["argv"])
        assert "Traceback" not in out + err, case["id"]
        said = {0: "clean", 1: "hazard", 2: "error", 3: "not judged"}[rc]
        outcomes.setdefault(f"{case['expect']} -> {said}", []).append(case["id"])
    counts = {k: len(v) for k, v in outcomes.items()}
    assert "hazard -> clean" not in outcomes, outcomes  # the first runs had 8 and 1
    assert counts.get("refused -> clean", 0) <= silent_refusals, outcomes  # outside the catalogue (RUNS.md)
    assert counts.get("clean -> hazard", 0) <= false_alarms, outcomes  # each named in RUNS.md
    assert counts.get("hazard -> hazard", 0) >= found, outcomes
