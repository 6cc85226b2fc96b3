"""The hook as users install it: a real pre-commit (from PyPI) runs this repository's hook on a git repo."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

BAD = """\
from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class MyDraftSpeculator(DraftModelSpeculator):
    def propose(self, num_reqs, num_tokens):
        batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
        return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=batch_desc.num_tokens)
"""
FIXED = BAD.replace(
    "        return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=batch_desc.num_tokens)",
    "        return self._build_uniform_attn_metadata(num_reqs=num_reqs, batch_desc=batch_desc, num_query_per_req=1)",
)


def git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.invalid",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.invalid",
        },
    )


def try_repo(project: Path, home: Path, *files: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(REPO), "specguard", "--files", *(files or ["spec.py"])]
        + ["--verbose"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PRE_COMMIT_HOME": str(home)},
    )


def test_hook_fails_on_the_bad_speculator_and_passes_once_fixed(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q")
    (project / "spec.py").write_text(BAD)
    git(project, "add", "spec.py")

    failed = try_repo(project, tmp_path / "pre-commit-home")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "specguard" in failed.stdout and "Failed" in failed.stdout
    assert "spec.py:8:67: SG103" in failed.stdout

    (project / "spec.py").write_text(FIXED)
    git(project, "add", "spec.py")
    passed = try_repo(project, tmp_path / "pre-commit-home")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "Passed" in passed.stdout

    # pre-commit names the files it checks; the hook passes --force-exclude so the project's excludes still hold
    (project / "legacy").mkdir()
    (project / "legacy" / "old.py").write_text(BAD)
    (project / "pyproject.toml").write_text('[tool.specguard]\nexclude = ["legacy/*"]\n')
    git(project, "add", "legacy/old.py", "pyproject.toml")
    excluded = try_repo(project, tmp_path / "pre-commit-home", "legacy/old.py", "spec.py")
    assert excluded.returncode == 0, excluded.stdout + excluded.stderr
