"""The layers are checked: `lint-imports` (import-linter, run by .ci/run) keeps the contracts of pyproject.toml,
and a forbidden import in a scratch copy of the package makes it fail with a message naming both modules."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# import-linter is in the test extra, beside the python running the tests (as in .ci/run)
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=project,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(project)},
        timeout=300,
    )


def _scratch(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    shutil.copytree(REPO / "specguard", project / "specguard", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", project)
    return project


def test_the_contracts_hold(tmp_path: Path) -> None:
    out = _lint(_scratch(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_a_forbidden_import_fails_naming_both_modules(tmp_path: Path) -> None:
    project = _scratch(tmp_path)
    values = project / "specguard" / "evaluation" / "values.py"
    values.write_text(values.read_text() + "\nfrom specguard.rules import base  # noqa: E402\n")
    out = _lint(project)
    assert out.returncode != 0
    assert "BROKEN" in out.stdout
    assert "specguard.evaluation.values -> specguard.rules.base" in out.stdout, out.stdout
