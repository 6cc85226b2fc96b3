"""Issue 29's blind SGLang sets (tests/corpus/blind_sglang_r1, written by someone who never read specguard), run as
its RUNS.md says: the package beside SGLang 0.5.23's real tree, JSON output, scored per function like the blind
object sets. Today's numbers are floors no change may fall below (and false positives a ceiling); the set's first
run is in its RUNS.md."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import unpacked
from tests.test_adversarial_corpus import corpus_cases, score

CORPUS = Path(__file__).resolve().parent / "corpus"

# set folder, package, (bugs, labelled functions) as LABELS.md totals them, found at least, false positives at most
SETS = {
    "first": ("blind_sglang_r1", "blindsg1", (42, 85), 7, 1),
}


@pytest.mark.parametrize("name", list(SETS))
def test_a_blind_sglang_set_is_no_worse_than_today(name: str, cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    folder, package, totals, found, false_positives = SETS[name]
    project = tmp_path / "project"
    shutil.copytree(CORPUS / folder / package, project / package)
    (project / "sglang").symlink_to(unpacked("sglang", "0.5.23"))
    out = cli("check", package, "--format", "json", "--no-cache", cwd=project)
    assert out.returncode in (0, 1), out.stderr
    cases = corpus_cases(CORPUS / folder / package)
    assert (len([c for c in cases if c.expected != "clean"]), len(cases)) == totals
    result = score(json.loads(out.stdout), project, cases, package=package)
    assert len(result.bugs) - len(result.missed) >= found, result.summary()
    assert len(result.false_positives) <= false_positives, result.summary()
