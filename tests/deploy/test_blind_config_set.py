"""Blind config sets 1-6 (`tests/corpus/blind_config_r1` to `_r6`, issue 30): 69, 69, 82, 85, 74 and 16 serving configs,
written by someone who never read specguard, each labelled with what vLLM's real code does (`hazard`, `refused` by
vLLM itself, or `clean`), on real releases and forks of them. Run with `--strict` as an operator's CI gate would: a
hazard or a refusal judged clean (exit 0) is a silent miss. The numbers are floors no change may fall below; each
set's RUNS.md has each run."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from specguard.config_cli import config_main
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
FOLDERS = list(FLOORS)
RESULTS = {0: "clean", 1: "hazard", 2: "error", 3: "not judged"}


@pytest.fixture(scope="module")
def outcomes(source_dir, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, list[str]]]:  # type: ignore[no-untyped-def]
    """Every set's cases, run once for the module: the cases of all six sets by release, forks last. The source
    facts of a tree are kept for a few trees per process (`deploy.facts._facts_for`), so each set in its own
    release order parsed and analyzed most releases again; a case that ends in a traceback is its own outcome."""
    work = tmp_path_factory.mktemp("blind-configs")
    cases = [(folder, case) for folder in FLOORS for case in json.loads((CORPUS / folder / "cases.json").read_text())]
    found: dict[str, dict[str, list[str]]] = {folder: {} for folder in FLOORS}
    for folder, case in sorted(cases, key=lambda fc: (bool(fc[1]["fork"]), fc[1]["version"], FOLDERS.index(fc[0]))):
        here = work / folder
        here.mkdir(exist_ok=True)
        tree = source_dir(case["version"])
        if case["fork"]:
            tree = fork(tree, here / case["id"])
            for edit in case["fork"]:
                rewrite(tree, edit["file"], replace(edit["old"], edit["new"]))
        argv = ["--vllm-source", str(tree), "--strict"]
        argv += [f"--env={k}={v}" for k, v in case["env"].items()]
        if case["yaml"]:
            (here / f"{case['id']}.yaml").write_text(case["yaml"])
            argv.append(str(here / f"{case['id']}.yaml"))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = config_main([*argv, "--", *case["argv"]])
        said = "traceback" if "Traceback" in out.getvalue() + err.getvalue() else RESULTS[rc]
        found[folder].setdefault(f"{case['expect']} -> {said}", []).append(case["id"])
    return found


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_hazard_is_judged_clean(outcomes: dict[str, dict[str, list[str]]], folder: str) -> None:
    silent_refusals, false_alarms, found = FLOORS[folder]
    counts = {k: len(v) for k, v in outcomes[folder].items()}
    assert not any(k.endswith("-> traceback") for k in counts), outcomes[folder]
    assert "hazard -> clean" not in counts, outcomes[folder]  # the first runs had 8 and 1
    assert counts.get("refused -> clean", 0) <= silent_refusals, outcomes[folder]  # outside the catalogue (RUNS.md)
    assert counts.get("clean -> hazard", 0) <= false_alarms, outcomes[folder]  # each named in RUNS.md
    assert counts.get("hazard -> hazard", 0) >= found, outcomes[folder]
