"""The README's Quickstart and docs/integrations.md, followed as written: in a fresh virtual environment, against a
fresh clone of this repository, each snippet read out of the markdown (so a change to the docs changes what runs).

One substitution: this repository's URL (pyproject.toml's Repository) becomes the local clone, since the tests run
offline. Every other word of a snippet runs as it stands. The clone holds what is committed, so the working tree's
uncommitted changes are not what these tests install (CI runs on a clean checkout, where the two are the same)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest
import yaml
from test_pre_commit import BAD, FIXED, git

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
REPOSITORY, VERSION = PROJECT["urls"]["Repository"], PROJECT["version"]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", flags=re.MULTILINE | re.DOTALL)


def snippets(page: Path, heading: str) -> dict[str, list[str]]:
    """The code blocks of one section of a markdown page (up to the next heading of its level), by language."""
    text = page.read_text(encoding="utf-8")
    level = heading.split(" ")[0]
    start = text.index(f"\n{heading}\n")
    end = text.find(f"\n{level} ", start + 1)
    found: dict[str, list[str]] = {}
    for lang, body in FENCE.findall(text[start : end if end != -1 else None]):
        found.setdefault(lang, []).append(body)
    return found


INTEGRATIONS = REPO / "docs" / "integrations.md"


@dataclass
class Fresh:
    """A new venv (first on PATH; ruff, which a ruff user has, after it) and a clone of the repository."""

    home: Path
    clone: Path
    venv: Path
    env: dict[str, str]
    quickstart: subprocess.CompletedProcess

    def bash(self, script: str, cwd: Path) -> subprocess.CompletedProcess:
        """A snippet as a user types it in a shell: stops at the first command that fails."""
        script = script.replace(REPOSITORY, self.clone.as_uri() if "git+" in script else str(self.clone))
        return subprocess.run(
            ["bash", "-e", "-c", script], cwd=cwd, env=self.env, capture_output=True, text=True, timeout=900
        )

    def specguard(self, *args: str, cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.venv / "bin" / "specguard"), *args], cwd=cwd, env=self.env, capture_output=True, text=True
        )


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Fresh:
    home = tmp_path_factory.mktemp("fresh")
    clone = home / "specguard"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=300)
    # The repository carries the release tag the docs pin (`rev: v0.1.0`), but CI runs on a clean clone that may
    # not have fetched tags: only where this clone lacks the tag is it created here, at HEAD.
    tag = f"v{VERSION}"
    has_tag = subprocess.run(["git", "rev-parse", "-q", "--verify", f"refs/tags/{tag}"], cwd=clone, capture_output=True)
    if has_tag.returncode != 0:
        git(clone, "tag", "-a", tag, "-m", f"specguard {VERSION}")

    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    tools = home / "tools"
    tools.mkdir()
    (tools / "ruff").symlink_to(Path(sys.executable).parent / "ruff")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(
        PATH=f"{venv / 'bin'}:{tools}:{os.environ['PATH']}",
        VIRTUAL_ENV=str(venv),
        PRE_COMMIT_HOME=str(home / "pre-commit-home"),
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.invalid",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.invalid",
    )
    made = Fresh(home, clone, venv, env, subprocess.CompletedProcess([], 0))
    # "On a fresh machine with Python >= 3.10, pip and git, from a clone of this repository": its first command
    first = snippets(REPO / "README.md", "## Quickstart")["bash"][0]
    made.quickstart = made.bash(first, clone)
    return made


def test_the_quickstarts_first_command_installs_specguard_and_reports_the_readmes_findings(fresh: Fresh) -> None:
    out = fresh.quickstart
    assert out.returncode == 1, out.stdout + out.stderr  # findings
    assert shutil.which("specguard", path=fresh.env["PATH"]) == str(fresh.venv / "bin" / "specguard")
    # the README's example output, finding for finding (its messages are shortened with "...")
    shown = snippets(REPO / "README.md", "## `specguard check`")["console"]
    (console,) = [b for b in shown if b.startswith("$ specguard check examples/\n")]
    where = re.compile(r"^(\S+:\d+:\d+: SG\d{3})", flags=re.MULTILINE)
    assert where.findall(out.stdout) == where.findall(console)
    assert "Found 7 findings." in out.stdout and "Found 7 findings." in console


def test_the_installed_package_writes_the_committed_docs_without_the_repository(fresh: Fresh) -> None:
    python = str(fresh.venv / "bin" / "python")
    imported = [python, "-c", "import specguard; print(specguard.__file__)"]
    where = subprocess.run(imported, cwd=fresh.home, capture_output=True, text=True)
    assert where.stdout.startswith(str(fresh.venv))  # the installed wheel, not the clone
    checked = subprocess.run(
        [python, "-m", "specguard.docs", "--check", str(fresh.clone / "docs")],
        cwd=fresh.home,
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stderr


def test_pre_commit_as_the_page_configures_it_runs_the_tagged_hook(fresh: Fresh) -> None:
    blocks = snippets(INTEGRATIONS, "## pre-commit")
    (config,) = blocks["yaml"]
    (commands,) = blocks["bash"]
    (repo,) = yaml.safe_load(config)["repos"]
    assert repo["repo"] == REPOSITORY and repo["rev"] == f"v{VERSION}"
    hooks = {h["id"] for h in yaml.safe_load((fresh.clone / ".pre-commit-hooks.yaml").read_text())}
    assert {h["id"] for h in repo["hooks"]} <= hooks

    project = fresh.home / "pre-commit-project"
    project.mkdir()
    git(project, "init", "-q")
    (project / ".pre-commit-config.yaml").write_text(config.replace(REPOSITORY, str(fresh.clone)))
    (project / "spec.py").write_text(BAD)
    git(project, "add", ".")
    failed = fresh.bash(commands, project)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "spec.py:8:67: SG103" in failed.stdout and "Failed" in failed.stdout

    (project / "spec.py").write_text(FIXED)
    git(project, "add", ".")
    passed = fresh.bash(commands, project)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "Passed" in passed.stdout


def test_the_actions_workflow_writes_sarif_from_a_subdirectory_whose_paths_resolve_from_the_root(fresh: Fresh) -> None:
    (workflow,) = snippets(INTEGRATIONS, "## GitHub Actions: code scanning")["yaml"]
    parsed = yaml.safe_load(workflow)
    assert parsed["permissions"]["security-events"] == "write"
    (job,) = parsed["jobs"].values()
    steps = job["steps"]
    assert steps[0]["uses"].startswith("actions/checkout@")
    (upload,) = [s for s in steps if s.get("uses", "").startswith("github/codeql-action/upload-sarif@")]
    assert "!cancelled()" in upload["if"]  # uploads after the check step failed on findings
    (check,) = [s for s in steps if "working-directory" in s]

    # the checked-out repository: a fork's package in the subdirectory the workflow names
    workspace = fresh.home / "workspace"
    workspace.mkdir()
    git(workspace, "init", "-q")
    shutil.copytree(REPO / "examples" / "myfork", workspace / check["working-directory"])
    for step in [s for s in steps if "run" in s]:
        done = fresh.bash(step["run"], workspace / step.get("working-directory", "."))
        assert done.returncode == (1 if step is check else 0), done.stdout + done.stderr

    sarif = json.loads((workspace / upload["with"]["sarif_file"]).read_text())
    (run,) = sarif["runs"]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == workspace.resolve().as_uri() + "/"
    locations = [loc["physicalLocation"]["artifactLocation"] for r in run["results"] for loc in r["locations"]]
    assert len(locations) == 7
    for artifact in locations:
        assert artifact["uriBaseId"] == "%SRCROOT%"
        assert artifact["uri"].startswith(f"{check['working-directory']}/")  # from the root, not the subdirectory
        assert (workspace / unquote(artifact["uri"])).is_file()


def test_ruff_with_lint_external_keeps_the_noqa_comments_specguard_reads(fresh: Fresh) -> None:
    blocks = snippets(INTEGRATIONS, "## Beside ruff")
    (config,) = blocks["toml"]
    (command,) = blocks["bash"]
    flagged = "batch_desc.num_tokens)"  # the line SG103 reports
    suppressed = BAD.replace(flagged, f"{flagged}  # noqa: SG103, E501")

    def ruff_fix(name: str, pyproject: str) -> tuple[Path, subprocess.CompletedProcess]:
        project = fresh.home / name
        project.mkdir()
        (project / "pyproject.toml").write_text(pyproject)
        (project / "spec.py").write_text(suppressed)
        assert fresh.specguard("check", "spec.py", cwd=project).returncode == 0  # the noqa holds
        return project, fresh.bash(command, project)

    kept, done = ruff_fix("ruff-external", config)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "# noqa: SG103\n" in (kept / "spec.py").read_text()  # E501, unused, is gone; SG103 stays
    assert fresh.specguard("check", "spec.py", cwd=kept).returncode == 0

    # without it, RUF100's fix takes the SG code away with the ruff one, and the finding is back
    lost, done = ruff_fix("ruff-plain", "[tool.ruff]\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "noqa" not in (lost / "spec.py").read_text()
    assert "SG103" in fresh.specguard("check", "spec.py", cwd=lost).stdout
