"""The hook as users install it: a real pre-commit (from PyPI) runs this repository's hook on a git repo, as
`pre-commit try-repo` and from a `.pre-commit-config.yaml` with `args: [--fix]`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
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


# The base helper is the project's own (the hook's environment has no vLLM): deleting a pure forward to it is safe
# only where its definition shows that every call binds alike.
BASE = """\
class DraftModelSpeculator:
    def _build_attn_metadata(self, num_reqs, batch_desc):
        return None
"""
FORWARD = """\
from myfork.speculator import DraftModelSpeculator


class MyDraftSpeculator(DraftModelSpeculator):
    def propose(self, num_reqs):
        return num_reqs

    def _build_attn_metadata(self, num_reqs, batch_desc):
        return super()._build_attn_metadata(num_reqs, batch_desc)
"""


def snapshot_of_this_checkout(target: Path) -> str:
    """This working tree, committed in a repository of its own (what try-repo does), so a config can pin it."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    for name in files:
        if (REPO / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, target / name)
    git(target, "init", "-q")
    git(target, "add", "-A")
    git(target, "commit", "-q", "-m", "snapshot")
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=target, capture_output=True, text=True).stdout.strip()


def test_with_fix_the_hook_rewrites_the_file_and_fails_like_ruffs_then_passes(tmp_path: Path) -> None:
    hooks = tmp_path / "specguard"
    rev = snapshot_of_this_checkout(hooks)
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q")
    (project / ".pre-commit-config.yaml").write_text(
        textwrap.dedent(f"""
        repos:
          - repo: {hooks}
            rev: {rev}
            hooks:
              - id: specguard
                args: [--fix]
        """)
    )
    (project / "spec.py").write_text(FORWARD)
    (project / "myfork").mkdir()
    (project / "myfork" / "__init__.py").write_text("")
    (project / "myfork" / "speculator.py").write_text(BASE)
    git(project, "add", ".")

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pre_commit", "run", "--files", "spec.py", "--verbose"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home")},
        )

    fixed = run()
    assert fixed.returncode == 1, fixed.stdout + fixed.stderr
    assert "Failed" in fixed.stdout and "files were modified by this hook" in fixed.stdout
    assert "Found 1 finding (1 fixed, 0 remaining)." in fixed.stdout
    assert (project / "spec.py").read_text() == FORWARD.split("\n\n    def _build_attn_metadata")[0] + "\n"
    git(project, "add", "spec.py")
    passed = run()
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "Passed" in passed.stdout
