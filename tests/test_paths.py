"""However the paths are typed, and from wherever in the project: the same files, findings and baseline entries.

Issue 12 items 11 (exclude and force-exclude), 12 (baselines keyed relative to the configuration root) and 13 (one
file named twice is analyzed once).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


BAD = """\
from vllm.v1.worker.gpu import attn_utils
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class Drafter(DraftModelSpeculator):
    def propose(self, num_reqs):
        return attn_utils.build_attn_metadata(num_reqs=num_reqs)
"""


@pytest.fixture
def fork(tmp_path: Path) -> Path:
    """A project whose pyproject excludes myfork/legacy/: one finding outside it, two inside."""
    (tmp_path / "myfork" / "legacy").mkdir(parents=True)
    (tmp_path / "myfork" / "spec.py").write_text(BAD)
    (tmp_path / "myfork" / "legacy" / "old.py").write_text(BAD)
    (tmp_path / "myfork" / "legacy" / "older.py").write_text(BAD)
    (tmp_path / "pyproject.toml").write_text('[tool.specguard]\nexclude = ["myfork/legacy/*"]\n')
    return tmp_path


def files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in (root / "myfork").rglob("*.py"))


def findings(out) -> list[tuple[str, str, int]]:  # type: ignore[no-untyped-def]
    assert out.returncode in (0, 1), out.stderr
    return sorted((Path(f["filename"]).name, f["code"], f["location"]["row"]) for f in json.loads(out.stdout))


@pytest.mark.parametrize("how", ["config", "flag"])
def test_force_exclude_gives_the_same_findings_however_the_files_are_named(cli, fork: Path, how: str) -> None:  # type: ignore[no-untyped-def]
    if how == "config":
        (fork / "pyproject.toml").write_text('[tool.specguard]\nexclude = ["myfork/legacy/*"]\nforce-exclude = true\n')
    flag = ["--force-exclude"] if how == "flag" else []
    json_out = ["--format", "json", "--no-cache", *flag]
    one = [("spec.py", "SG101", 7)]
    assert findings(cli("check", "myfork", *json_out, cwd=fork)) == one
    assert findings(cli("check", *files(fork), *json_out, cwd=fork)) == one  # as pre-commit names them
    assert findings(cli("check", ".", *json_out, cwd=fork / "myfork")) == one
    assert findings(cli("check", str(fork / "myfork"), *json_out, cwd=fork / "myfork" / "legacy")) == one
    # a folder named explicitly is excluded too, as ruff does under force-exclude
    assert findings(cli("check", "legacy", *json_out, cwd=fork / "myfork")) == []


def test_without_force_exclude_a_file_named_explicitly_is_analyzed(cli, fork: Path) -> None:  # type: ignore[no-untyped-def]
    out = cli("check", *files(fork), "--format", "json", "--no-cache", cwd=fork)
    assert [name for name, _, _ in findings(out)] == ["old.py", "older.py", "spec.py"]
    # but the patterns are still matched relative to the configuration root, from any folder
    assert findings(cli("check", ".", "--format", "json", "--no-cache", cwd=fork / "myfork")) == [
        ("spec.py", "SG101", 7)
    ]


def test_force_exclude_key_is_validated(cli, fork: Path) -> None:  # type: ignore[no-untyped-def]
    (fork / "pyproject.toml").write_text('[tool.specguard]\nforce-exclude = "yes please"\n')
    out = cli("check", "myfork", cwd=fork)
    assert out.returncode == 2 and "key 'force-exclude'" in out.stderr and len(out.stderr.splitlines()) == 1


@pytest.mark.parametrize("marker", ["pyproject.toml", ".git"])
def test_baseline_written_one_way_is_read_any_other_way(cli, tmp_path: Path, marker: str) -> None:  # type: ignore[no-untyped-def]
    """Written with `check examples`, read with an absolute path or from inside examples/: nothing is new. The
    project has no [tool.specguard]: its root is the folder with a pyproject.toml or .git."""
    project = tmp_path / "project"
    shutil.copytree(EXAMPLES, project / "examples")
    if marker == ".git":
        (project / ".git").mkdir()
    else:
        (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    baseline = tmp_path / "base.json"
    written = cli("check", "examples", "--write-baseline", str(baseline), "--no-cache", cwd=project)
    assert written.returncode == 0 and written.stdout.endswith(
        "Found 7 findings.\n[*] 2 fixable with `--fix` (1 unsafe fix available with `--fix --unsafe-fixes`).\n"
    )
    entries = json.loads(baseline.read_text())["findings"]
    assert len(entries) == 7 and all(e[0].startswith("examples/myfork/") for e in entries)
    for args, cwd in [
        ([str(project / "examples")], project),
        (["."], project / "examples"),
        (["../.."], project / "examples" / "myfork" / "spec_decode"),
    ]:
        out = cli("check", *args, "--baseline", str(baseline), "--no-cache", cwd=cwd)
        assert (out.returncode, out.stdout, out.stderr) == (0, "All checks passed!\n", ""), (args, cwd)


def test_one_file_named_twice_is_analyzed_once(cli) -> None:  # type: ignore[no-untyped-def]
    dflash = EXAMPLES / "myfork" / "spec_decode" / "dflash.py"
    repo = EXAMPLES.parent
    for args in [
        ["examples", str(dflash)],
        [str(dflash), "examples"],
        ["examples", "examples/myfork/../myfork/spec_decode/dflash.py", "examples/myfork"],
    ]:
        out = cli("check", *args, "--no-cache", cwd=repo)
        assert out.returncode == 1 and out.stdout.endswith(
            "Found 7 findings.\n[*] 2 fixable with `--fix` (1 unsafe fix available with `--fix --unsafe-fixes`).\n"
        ), (
            args,
            out.stdout,
        )
