"""Issue 28's blind sets (tests/corpus/blind_objects_r1 to _r10, each written by someone who never read
specguard), run as their RUNS.md say: the package beside vLLM 0.33.0's real tree, JSON output, scored per function
like the adversarial corpus. Today's numbers are floors no change may fall below (and false positives a ceiling);
issue 28 raises them to its goal. Each set's first run is in its RUNS.md."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.test_adversarial_corpus import corpus_cases, score

CORPUS = Path(__file__).resolve().parent / "corpus"

# set folder, package, (bugs, labelled functions) as LABELS.md totals them, found at least, false positives at most
SETS = {
    "first": ("blind_objects_r1", "blindobj", (52, 92), 42, 2),
    "second": ("blind_objects_r2", "blindobj2", (44, 87), 42, 7),
    "third": ("blind_objects_r3", "blindobj3", (55, 96), 55, 0),
    "fourth": ("blind_objects_r4", "blindobj4", (64, 120), 61, 0),
    "fifth": ("blind_objects_r5", "blindobj5", (64, 103), 64, 0),
    "sixth": ("blind_objects_r6", "blindobj6", (60, 99), 58, 0),
    "seventh": ("blind_objects_r7", "blindobj7", (55, 94), 55, 0),
    "eighth": ("blind_objects_r8", "blindobj8", (60, 101), 59, 0),
    "ninth": ("blind_objects_r9", "blindobj9", (27, 45), 26, 0),
    "tenth": ("blind_objects_r10", "blindobj10", (58, 95), 58, 1),
}


@pytest.mark.parametrize("name", list(SETS))
def test_a_blind_object_set_is_no_worse_than_today(name: str, cli, tmp_path, vllm_source) -> None:  # type: ignore[no-untyped-def]
    assert_no_worse(cli, tmp_path, *SETS[name], framework=vllm_source("0.33.0"))


def assert_no_worse(  # type: ignore[no-untyped-def]
    cli,
    tmp_path: Path,
    folder: str,
    package: str,
    totals: tuple[int, int],
    found: int,
    false_positives: int,
    *,
    framework: Path,
) -> None:
    """A blind set's package beside the framework's real package (a link of its name), checked as a user would,
    scored per function: at least `found` bugs found, at most `false_positives` correct functions flagged."""
    project = tmp_path / "project"
    shutil.copytree(CORPUS / folder / package, project / package)
    (project / framework.name).symlink_to(framework)
    out = cli("check", package, "--format", "json", "--no-cache", cwd=project)
    assert out.returncode in (0, 1), out.stderr
    cases = corpus_cases(CORPUS / folder / package)
    assert (len([c for c in cases if c.expected != "clean"]), len(cases)) == totals
    result = score(json.loads(out.stdout), project, cases, package=package)
    assert len(result.bugs) - len(result.missed) >= found, result.summary()
    assert len(result.false_positives) <= false_positives, result.summary()
