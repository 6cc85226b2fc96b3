"""`specguard check` at this repository's root, as a contributor (or a ruff habit) runs it: the project's own
`[tool.specguard]` leaves out the test corpora and examples/, whose findings are there on purpose, so the check
passes on the project's own code and `--fix` there never edits them; a path named on the command line is still
checked (ruff's behaviour without `--force-exclude`), so the Quickstart's `specguard check examples/` finds what
the README shows."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LEFT_OUT = [REPO / "tests" / "corpus", REPO / "examples"]


def test_a_check_of_the_root_selects_no_file_of_the_corpora_or_examples(cli) -> None:  # type: ignore[no-untyped-def]
    shown = cli("check", ".", "--no-cache", "--show-files", cwd=REPO)
    assert shown.returncode == 0, shown.stderr
    files = [Path(line) for line in shown.stdout.splitlines()]
    assert REPO / "specguard" / "cli.py" in files and REPO / "tests" / "conftest.py" in files  # it did walk
    assert [f for f in files if any(f.is_relative_to(d) for d in LEFT_OUT)] == []
    assert any((REPO / "tests" / "corpus").rglob("*.py")) and any((REPO / "examples").rglob("*.py"))


def test_a_check_of_the_root_passes(cli) -> None:  # type: ignore[no-untyped-def]
    done = cli("check", ".", "--no-cache", "--output-format", "json", cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads(done.stdout) == []


def test_the_examples_named_on_the_command_line_are_checked(cli) -> None:  # type: ignore[no-untyped-def]
    done = cli("check", "examples/", "--no-cache", "--output-format", "json", cwd=REPO)
    assert done.returncode == 1, done.stderr
    assert len(json.loads(done.stdout)) == 7  # the README's seven findings, one per rule
