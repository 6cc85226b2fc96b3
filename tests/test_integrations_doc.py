"""The README's Install and Quickstart and docs/integrations.md, followed as written: a clone made by the Quickstart's
own clone command, the virtual environment its first command makes, each snippet read out of the markdown (so a
change to the docs changes what runs).

One substitution: this repository's URL (pyproject.toml's Repository) becomes this repository (to clone) or the
local clone (to install from), since the tests run offline. Every other word of a snippet runs as it stands. The
clone holds what is committed, so the working tree's uncommitted changes are not what these tests install (CI runs
on a clean checkout, where the two are the same)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
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
REPOSITORY = PROJECT["urls"]["Repository"]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", flags=re.MULTILINE | re.DOTALL)


def section(page: Path, heading: str) -> str:
    """One section of a markdown page, up to the next heading of its level."""
    text = page.read_text(encoding="utf-8")
    level = heading.split(" ")[0]
    start = text.index(f"\n{heading}\n")
    end = text.find(f"\n{level} ", start + 1)
    return text[start : end if end != -1 else None]


def snippets(page: Path, heading: str) -> dict[str, list[str]]:
    """The code blocks of one section of a markdown page, by language."""
    found: dict[str, list[str]] = {}
    for lang, body in FENCE.findall(section(page, heading)):
        found.setdefault(lang, []).append(body)
    return found


README = REPO / "README.md"
INTEGRATIONS = REPO / "docs" / "integrations.md"


@dataclass
class Fresh:
    """The clone and the venv the Quickstart made, and the shell it left: the venv first on PATH (ruff, which a ruff
    user has, after it)."""

    home: Path
    clone: Path
    venv: Path
    env: dict[str, str]
    quickstart: subprocess.CompletedProcess

    def bash(self, script: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """A snippet, in the Quickstart's shell (or `env`), installing from the clone where it names the URL."""
        # a file URL with a host: the pip a new venv comes with refuses `name @ git+file:///...` (no netloc)
        script = script.replace(REPOSITORY, f"file://localhost{self.clone}" if "git+" in script else str(self.clone))
        return shell(script, cwd, self.env if env is None else env)

    def specguard(self, *args: str, cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.venv / "bin" / "specguard"), *args], cwd=cwd, env=self.env, capture_output=True, text=True
        )


def shell(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """A snippet as a user types it in a shell: stops at the first command that fails."""
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Fresh:
    home = tmp_path_factory.mktemp("fresh")
    tools = home / "tools"
    tools.mkdir()
    (tools / "ruff").symlink_to(Path(sys.executable).parent / "ruff")
    # a shell outside any virtual environment, as on a fresh machine
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(
        PATH=f"{tools}:{os.environ['PATH']}",
        PRE_COMMIT_HOME=str(home / "pre-commit-home"),
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.invalid",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.invalid",
    )
    # The Quickstart's clone command, with this repository under the name the URL gives the clone.
    (clone_command,) = re.findall(r"`(git clone [^`]+)`", section(README, "## Quickstart"))
    origin = home / "origin" / REPOSITORY.rsplit("/", 1)[1]
    origin.parent.mkdir()
    origin.symlink_to(REPO)
    cloned = shell(clone_command.replace(REPOSITORY, str(origin)), home, env)
    assert cloned.returncode == 0, cloned.stderr
    clone = home / origin.name
    # No tag is made here: the docs install from `main` or a commit, which every clone has.

    # Exactly two commands: the first makes and enters a venv, installs, checks; the second is the whole CI.
    first, second, _tier = snippets(README, "## Quickstart")["bash"]
    assert second == "bash .ci/run\n" and (REPO / ".ci" / "run").is_file()
    quickstart = shell(first, clone, env)
    # The shell stays in the venv the first command made: later snippets run there.
    (venv,) = re.findall(r"python3 -m venv (\S+) && \. \1/bin/activate && ", first)
    venv_dir = clone / venv
    env.update(PATH=f"{venv_dir / 'bin'}:{env['PATH']}", VIRTUAL_ENV=str(venv_dir))
    return Fresh(home, clone, venv_dir, env, quickstart)


def test_the_quickstarts_first_command_installs_specguard_and_reports_the_readmes_findings(fresh: Fresh) -> None:
    out = fresh.quickstart
    assert out.returncode == 1, out.stdout + out.stderr  # findings
    assert shutil.which("specguard", path=fresh.env["PATH"]) == str(fresh.venv / "bin" / "specguard")
    assert (fresh.venv / "pyvenv.cfg").is_file()  # the venv the command made, inside the clone
    # the README's example output, finding for finding (its messages are shortened with "...")
    shown = snippets(README, "## `specguard check`")["console"]
    (console,) = [b for b in shown if b.startswith("$ specguard check examples/\n")]
    where = re.compile(r"^(\S+:\d+:\d+: SG\d{3})", flags=re.MULTILINE)
    assert where.findall(out.stdout) == where.findall(console)
    assert "Found 7 findings." in out.stdout and "Found 7 findings." in console


EXTRAS = set(PROJECT["optional-dependencies"])
PAGES_NAMING_INSTALLS = [
    README,
    REPO / "CONTRIBUTING.md",
    REPO / "benchmarks" / "README.md",
    *(REPO / "docs").rglob("*.md"),
]


def _installs() -> list[tuple[Path, str]]:
    """Every `pip install` of specguard the pages name, as (page, what is installed)."""
    seen = []
    for page in PAGES_NAMING_INSTALLS:
        for args in re.findall(r"pip install ([^`#&\n]*)", page.read_text(encoding="utf-8")):
            specs = [a for a in shlex.split(args) if not a.startswith("-")]
            if specs and (specs[0].startswith(".") or "specguard" in specs[0]):  # not prose, nor pre-commit
                seen.append((page, specs[0]))
    return seen


def _ref(url: str) -> str:
    """The ref of `git+REPOSITORY@REF`."""
    assert url.startswith(f"git+{REPOSITORY}@"), url
    return url.rsplit("@", 1)[1]


def test_every_install_the_docs_name_is_from_a_clone_or_a_branch_or_commit_the_repository_has() -> None:
    """specguard is not on a package index and has no release tag: every `pip install` of it the docs name installs
    from a clone (`.`, `'.[extras]'`) or from the repository's git URL at `main` or a commit (never a tag that a
    clone lacks), with extras the project defines."""
    from packaging.requirements import Requirement

    seen = _installs()
    for page, spec in seen:
        where = f"{page.relative_to(REPO)}: pip install {spec}"
        if spec.startswith("."):
            extras = re.fullmatch(r"\.(?:\[([\w,]+)\])?", spec)
            assert extras is not None, where
            assert set(filter(None, (extras.group(1) or "").split(","))) <= EXTRAS, where
            continue
        req = Requirement(spec) if " @ " in spec else None
        url = req.url if req is not None else spec
        assert req is None or (req.name == "specguard" and req.extras <= EXTRAS), where
        ref = _ref(url or "")
        assert ref == "main" or re.fullmatch(r"[0-9a-f]{40}", ref), where  # a branch that moves, or a pinned commit
        exists = subprocess.run(
            ["git", "rev-parse", "-q", "--verify", f"{ref}^{{commit}}"], cwd=REPO, capture_output=True
        )
        assert exists.returncode == 0, f"{where}: the repository has no {ref}"
    assert {"runtime", "config"} <= {e for _, s in seen if " @ " in s for e in Requirement(s).extras}
    assert not [s for _, s in seen if "@v" in s]  # no tag


def _pinned(fresh: Fresh) -> str:
    """The commit the README says to pin: what its `git ls-remote` command prints for main, run on the clone."""
    (command,) = re.findall(r"`(git ls-remote [^`]+)`", section(README, "## Install"))
    listed = fresh.bash(command, fresh.home)
    assert listed.returncode == 0, listed.stderr
    # the branch (a clone, standing in for the repository here, also lists its remote-tracking refs)
    (sha,) = [sha for sha, ref in map(str.split, listed.stdout.splitlines()) if ref == "refs/heads/main"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=fresh.clone, capture_output=True, text=True, check=True)
    assert sha == head.stdout.strip()
    return sha


def _installed_commit(python: Path) -> str:
    """The commit pip recorded for the specguard installed in a venv (PEP 610's direct_url.json)."""
    read = "from importlib.metadata import distribution as d; print(d('specguard').read_text('direct_url.json'))"
    # run outside the checkout, whose specguard.egg-info would be found first from the current folder
    done = subprocess.run([str(python), "-c", read], cwd=python.parent, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)["vcs_info"]["commit_id"]


# What the tests of this file and CI install, by what the docs write after `pip install`: a page that names another
# install fails the next test until a test here runs it.
RUN_HERE = {
    ".": "the Quickstart's first command; the Install block (test_the_install_sections_clone_lines_...)",
    ".[config]": "test_the_install_sections_clone_lines_install_in_the_quickstarts_venv",
    ".[runtime]": "test_the_runtime_extra_installs_the_vllm_plugin_from_main_a_pinned_commit_and_a_clone",
    f"specguard[config] @ git+{REPOSITORY}@main": "test_the_install_sections_git_url_installs_specguard_and_its_extra",
    f"specguard[runtime] @ git+{REPOSITORY}@main": "test_the_runtime_extra_installs_the_vllm_plugin_from_main_...",
    f"git+{REPOSITORY}@main": "test_the_actions_workflow_writes_sarif_... (the workflow's install step)",
    ".[test,config]": ".ci/run itself (CONTRIBUTING's test command)",
    ".[test]": "test_the_quickstarts_one_minute_tier_runs_the_analyzers_tests_in_its_venv (and CONTRIBUTING)",
}


def test_every_install_line_of_the_docs_is_run_by_a_test() -> None:
    assert {spec for _, spec in _installs()} == set(RUN_HERE)


def test_the_install_sections_git_url_installs_specguard_and_its_extra(fresh: Fresh) -> None:
    (block,) = snippets(README, "## Install")["bash"]
    (line,) = [x for x in block.splitlines() if "git+" in x and "[config]" in x]
    venv = fresh.home / "install-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {**fresh.env, "PATH": f"{venv / 'bin'}:{fresh.env['PATH']}", "VIRTUAL_ENV": str(venv)}
    done = fresh.bash(line, fresh.home, env)
    assert done.returncode == 0, done.stdout + done.stderr
    clean = fresh.clone / "examples" / "configs" / "clean.yaml"
    judged = subprocess.run([str(venv / "bin" / "specguard"), "config", str(clean)], env=env, capture_output=True)
    # it reads the YAML (the extra brought PyYAML); with no vLLM there, it says nothing could be judged
    assert judged.returncode == 0 and b"no hazard judged: no vLLM source" in judged.stdout, judged.stderr
    # `@main` installed the commit main is at, the one the README's `git ls-remote` names for pinning
    assert _installed_commit(venv / "bin" / "python") == _pinned(fresh)


def test_the_install_sections_clone_lines_install_in_the_quickstarts_venv(fresh: Fresh) -> None:
    (block,) = snippets(README, "## Install")["bash"]
    lines = [x.split("#")[0].strip() for x in block.splitlines() if re.match(r"pip install '?\.", x)]
    assert [shlex.split(x)[2] for x in lines] == [".", ".[config]"]
    for line in lines:
        done = fresh.bash(line, fresh.clone)  # in the clone, in the venv the Quickstart left
        assert done.returncode == 0, done.stdout + done.stderr
    clean = fresh.clone / "examples" / "configs" / "clean.yaml"
    judged = fresh.specguard("config", str(clean), cwd=fresh.home)
    assert judged.returncode == 0 and "no hazard judged: no vLLM source" in judged.stdout, judged.stderr


def _stub_vllm(folder: Path) -> Path:
    """A vLLM distribution of a few bytes, as a wheel: what the `runtime` extra needs to resolve without gigabytes.
    The guard's entry point and its `register()` with VLLM_SPECGUARD unset import nothing of vLLM."""
    folder.mkdir()
    wheel = folder / "vllm-0.33.0+stub-py3-none-any.whl"
    info = "vllm-0.33.0+stub.dist-info"
    files = {
        "vllm/__init__.py": "__version__ = '0.33.0'\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: vllm\nVersion: 0.33.0+stub\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return folder


def test_the_runtime_extra_installs_the_vllm_plugin_from_main_a_pinned_commit_and_a_clone(
    fresh: Fresh, tmp_path: Path
) -> None:
    """The README's and docs/runtime-guard.md's runtime installs, in one venv where vLLM is installed (a stub of it,
    which pip's configuration points `vllm` at: the lines run as written)."""
    (block,) = snippets(README, "## Install")["bash"]
    (line,) = [x.split("#")[0].strip() for x in block.splitlines() if "git+" in x and "[runtime]" in x]
    (guard_block,) = snippets(REPO / "docs" / "runtime-guard.md", "## Enable it in `vllm serve`")["bash"]
    assert line in guard_block.splitlines()  # the operator's page gives the README's line
    (from_clone,) = re.findall(
        r"`(pip install '\.\[runtime\]')`", section(REPO / "docs" / "runtime-guard.md", "## Enable it in `vllm serve`")
    )
    sha = _pinned(fresh)
    pinned = line.replace("@main'", f"@{sha}'")
    assert pinned != line

    stubs = _stub_vllm(tmp_path / "stubs")
    (tmp_path / "constraints.txt").write_text("vllm==0.33.0+stub\n")
    venv = tmp_path / "serving-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    links = " ".join(filter(None, [os.environ.get("PIP_FIND_LINKS", ""), str(stubs)]))
    env = {
        **fresh.env,
        "PATH": f"{venv / 'bin'}:{fresh.env['PATH']}",
        "VIRTUAL_ENV": str(venv),
        "PIP_FIND_LINKS": links,
        "PIP_CONSTRAINT": str(tmp_path / "constraints.txt"),
    }
    python = venv / "bin" / "python"
    for command, cwd in ((line, fresh.home), (pinned, fresh.home), (from_clone, fresh.clone)):
        done = fresh.bash(command, cwd, env)
        assert done.returncode == 0, command + done.stdout + done.stderr
        if command == line:
            assert _installed_commit(python) == sha  # main's commit, the one the pinned line names
    plugin = (
        "from importlib.metadata import entry_points, version\n"
        "(ep,) = entry_points(group='vllm.general_plugins', name='specguard')\n"
        "ep.load()()\n"  # register() with VLLM_SPECGUARD unset: installs nothing
        "import sys; print(ep.value, version('vllm'), 'torch' in sys.modules)\n"
    )
    loaded = subprocess.run([str(python), "-c", plugin], cwd=fresh.home, env=env, capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split() == ["specguard.runtime:register", "0.33.0+stub", "False"]


def test_the_quickstarts_one_minute_tier_runs_the_analyzers_tests_in_its_venv(fresh: Fresh) -> None:
    (tier,) = snippets(README, "## Quickstart")["bash"][2:]
    assert 'pytest -m "not slow"' in tier
    done = fresh.bash(tier, fresh.clone)  # in the clone, in the venv the Quickstart left
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = done.stdout.strip().splitlines()[-1]
    # the tier only (the slow modules are not even collected there), all passed
    assert re.fullmatch(r"=+ \d+ passed(, \d+ warnings?)? in [\d.]+s( \([\d:]+\))? =+", summary), summary


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


def test_pre_commit_as_the_page_configures_it_pins_main_to_its_commit_and_runs_the_hook(fresh: Fresh) -> None:
    blocks = snippets(INTEGRATIONS, "## pre-commit")
    (config,) = blocks["yaml"]
    (commands,) = blocks["bash"]
    (repo,) = yaml.safe_load(config)["repos"]
    assert repo["repo"] == REPOSITORY and repo["rev"] == "main"  # no release tag: a branch, pinned below
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
    # `pre-commit autoupdate --freeze` pinned `main` to the commit it is at
    (pinned,) = yaml.safe_load((project / ".pre-commit-config.yaml").read_text())["repos"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=fresh.clone, capture_output=True, text=True, check=True)
    assert pinned["rev"] == head.stdout.strip()

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
