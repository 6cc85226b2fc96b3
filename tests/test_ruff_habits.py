"""The habits a ruff user brings to `specguard check` (issue #21), each run side by side with the real ruff of the
test environment on the same files: a ruff upgrade that changes one of these behaviours fails here.

Where the two tools need different files (ruff's rules are not specguard's), each specguard code stands for a ruff
code with the same place in its prefix tree, so a selector means the same set on both sides: SG1 ~ F4,
SG10 ~ F40, SG101..SG105 ~ F401, F402, F404, F406, F407, SG2 ~ F8, SG20 ~ F84, SG201/SG202 ~ F841/F842. All of those
are in ruff's default selection, as every rule is in specguard's, so the two defaults agree too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

RUFF_OF = {
    "ALL": "ALL",
    "SG": "F",
    "SG1": "F4",
    "SG10": "F40",
    **{f"SG10{i}": f"F40{n}" for i, n in zip(range(1, 6), (1, 2, 4, 6, 7), strict=True)},
    "SG2": "F8",
    "SG20": "F84",
    "SG201": "F841",
    "SG202": "F842",
}
SPECGUARD_OF = {v: k for k, v in RUFF_OF.items()}
# Rules with no ruff rule to stand for them: ruff enables five F40x rules by default, and SG101-SG105 take them.
UNMAPPED = {"SG106", "SG203"}

# A speculator with two findings of different rules: SG101 on line 7, SG102 on line 9 (its `def`).
TWO_FINDINGS = """\
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class MySpeculator(DraftModelSpeculator):
    def propose(self, num_reqs):
        return build_attn_metadata(num_reqs=num_reqs)

    def _build_attn_metadata(self, *args, **kwargs):
        return super()._build_attn_metadata(*args, **kwargs)
"""
RUFF_JSON = ["check", "--no-cache", "--output-format", "json"]
# ruff's counterpart, selected with RUFF_TWO_RULES: E741 on line 1 (no fix), F401 on line 2 (a safe fix).
RUFF_TWO_FINDINGS = "l = 1\nimport os\n"
RUFF_TWO_RULES = ["--select", "E741,F401"]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A home of their own for both tools: no global gitignore or user configuration of this machine leaks in."""
    home = tmp_path / "home"
    home.mkdir()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")  # specguard's validated settings
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "XDG_CACHE_HOME": cache}


def ruff(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )


def write(root: Path, *names: str, text: str = "x = 1\n") -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def python_files(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.endswith(".py")]


def same_files(cli, tree: Path, env: dict[str, str], *args: str, cwd: Path | None = None) -> list[str]:  # type: ignore[no-untyped-def]
    """`--show-files` of both tools: the same .py files, listed the same way (absolute, sorted)."""
    ours = cli("check", "--show-files", *args, cwd=cwd or tree, env=env)
    theirs = ruff("check", "--no-cache", "--show-files", *args, cwd=cwd or tree, env=env)
    assert (ours.returncode, theirs.returncode) == (0, 0), ours.stderr + theirs.stderr
    assert python_files(ours.stdout) == python_files(theirs.stdout), args
    return [str(Path(p).relative_to(tree)) for p in python_files(ours.stdout)]


# --- file selection -------------------------------------------------------------------------------------------------


def test_default_excludes_are_ruffs(cli, tmp_path: Path, env: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    from specguard.program.discover import DEFAULT_EXCLUDE

    tree = tmp_path / "tree"
    folders = [n for n in DEFAULT_EXCLUDE if n != ".specguard_cache"]  # specguard's own cache: specguard's addition
    write(tree, "a.py", "build/m.py", "pkg/venv/m.py", "pkg/node_modules/m.py", *(f"{n}/m.py" for n in folders))
    listed = same_files(cli, tree, env, ".")
    assert listed == ["a.py", "build/m.py"]


GITIGNORE = """\
# a comment, then patterns of every kind git knows
ign/
*.gen.py
!keep.gen.py
/anchored.py
deep/**/x.py
dironly/
sub/*.tmp.py
[ab]c.py
[!a-c]q.py
\\#hash.py
trailing.py   \n"""

IGNORE_TREE = [
    "a.py",
    "ign/a.py",
    "x.gen.py",
    "keep.gen.py",
    "anchored.py",
    "sub/anchored.py",
    "deep/x.py",
    "deep/a/b/x.py",
    "dironly/a.py",
    "sub/y.tmp.py",
    "sub/deeper/y.tmp.py",
    "ac.py",
    "bc.py",
    "cc.py",
    "aq.py",
    "dq.py",
    "#hash.py",
    "trailing.py",
    "sub/local.py",
    "sub/re.gen.py",
    "info_excluded.py",
    "by_dot_ignore.py",
    "sub/by_dot_ignore.py",
]


def _ignore_tree(root: Path, git: bool) -> None:
    write(root, *IGNORE_TREE)
    (root / ".gitignore").write_text(GITIGNORE)
    (root / "sub" / ".gitignore").write_text("local.py\n!re.gen.py\n")  # deeper file wins: re-includes re.gen.py
    (root / ".ignore").write_text("by_dot_ignore.py\n!bc.py\n")  # .ignore wins over .gitignore
    if git:
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        (root / ".git" / "info" / "exclude").write_text("info_excluded.py\n")


def test_gitignore_is_respected_as_ruff_respects_it(cli, tmp_path: Path, env: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    tree = tmp_path / "repo"
    _ignore_tree(tree, git=True)
    listed = same_files(cli, tree, env, ".")
    assert listed == ["a.py", "aq.py", "bc.py", "cc.py", "keep.gen.py", "sub/anchored.py", "sub/deeper/y.tmp.py"] + [
        "sub/re.gen.py"
    ]
    # from a subfolder, the .gitignore files above it still apply
    assert same_files(cli, tree, env, ".", cwd=tree / "sub") == ["sub/anchored.py", "sub/deeper/y.tmp.py"] + [
        "sub/re.gen.py"
    ]
    # a file named explicitly is checked whatever the ignore files say; so is a folder named explicitly
    assert same_files(cli, tree, env, "ign/a.py", "x.gen.py") == ["ign/a.py", "x.gen.py"]
    assert same_files(cli, tree, env, "ign") == ["ign/a.py"]
    everything = same_files(cli, tree, env, ".", "--no-respect-gitignore")
    assert len(everything) == len(IGNORE_TREE)


def test_gitignore_counts_only_in_a_git_repository_but_dot_ignore_everywhere(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    tree = tmp_path / "plain"
    _ignore_tree(tree, git=False)
    listed = same_files(cli, tree, env, ".")
    assert "by_dot_ignore.py" not in listed and "x.gen.py" in listed and "ign/a.py" in listed


def test_gitignore_patterns_match_what_git_itself_ignores(tmp_path: Path, env: dict[str, str]) -> None:
    """git is the definition: every untracked file git reports as not ignored, and no other, is discovered."""
    from specguard.program.discover import discover

    tree = tmp_path / "repo"
    _ignore_tree(tree, git=True)
    (tree / ".ignore").unlink()  # ripgrep's and ruff's, not git's
    git = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    )
    expected = sorted(line.strip('"').replace("\\043", "#") for line in git.stdout.splitlines() if line.endswith(".py"))
    found = discover([tree], root=tree).files
    assert sorted(str(Path(f).relative_to(tree)) for f in found) == expected


MORE_PATTERNS = """\
**/gen_*/**
docs/**/*.py
a/**/b.py
*.py[co]
x?.py
[[:digit:]]*.py
\\[literal].py
odd\\ name.py
/top/*
!top/keep.py
*.skip.py
!*.skip.py
also.skip.py
"""


def test_more_patterns_match_what_git_ignores(tmp_path: Path, env: dict[str, str]) -> None:
    from specguard.program.discover import discover

    tree = tmp_path / "repo"
    names = ["gen_a/m.py", "x/gen_b/y/m.py", "docs/m.py", "docs/a/b/m.py", "a/b.py", "a/x/y/b.py", "b.py"]
    names += ["m.pyc", "m.pyo", "x1.py", "x12.py", "1m.py", "[literal].py", "l.py", "odd name.py", "top/m.py"]
    names += ["top/keep.py", "sub/top/m.py", "one.skip.py", "also.skip.py"]
    write(tree, *names)
    (tree / ".gitignore").write_text(MORE_PATTERNS)
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    git = subprocess.run(
        ["git", "-c", "core.quotePath=false", "ls-files", "--others", "--exclude-standard"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    )
    expected = sorted(line.strip('"') for line in git.stdout.splitlines() if line.strip('"').endswith(".py"))
    found = sorted(str(Path(f).relative_to(tree)) for f in discover([tree], root=tree).files)
    assert found == expected
    assert "top/keep.py" in found and "top/m.py" not in found and "l.py" in found  # not vacuous


def test_an_ignore_file_that_is_not_a_regular_file_is_skipped(tmp_path: Path) -> None:
    """A FIFO named .gitignore would block a plain read forever; it counts as absent."""
    from specguard.program.discover import discover

    write(tmp_path, "a.py", "sub/b.py")
    (tmp_path / ".git").mkdir()
    os.mkfifo(tmp_path / "sub" / ".gitignore")
    (tmp_path / ".gitignore").write_text("[z-a]\nb.py\n")  # a pattern git cannot use either, then a good one
    assert [Path(f).name for f in discover([tmp_path], root=tmp_path).files] == ["a.py"]


def test_exclude_replaces_the_defaults_and_extend_exclude_adds(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    tree = tmp_path / "proj"
    settings = 'exclude = ["legacy"]\nextend-exclude = ["gen_*.py", "pkg/old/*"]\n'
    write(tree, "pyproject.toml", text=f"[tool.ruff]\n{settings}\n[tool.specguard]\n{settings}")
    write(tree, "a.py", ".venv/m.py", "legacy/m.py", "pkg/legacy/m.py", "gen_x.py", "pkg/gen_y.py")
    write(tree, "pkg/old/m.py", "pkg/old/deeper/m.py", "pkg/new/m.py")
    assert same_files(cli, tree, env, ".") == [".venv/m.py", "a.py", "pkg/new/m.py"]
    # on the command line a pattern with a `/` is anchored at the current folder
    assert same_files(cli, tree, env, ".", "--extend-exclude", "new/*", cwd=tree / "pkg") == []
    assert "legacy/m.py" in same_files(cli, tree, env, ".", "--exclude", "other")
    # files named explicitly: checked, unless --force-exclude
    assert same_files(cli, tree, env, "legacy/m.py", "pkg/old/m.py") == ["legacy/m.py", "pkg/old/m.py"]
    assert same_files(cli, tree, env, "legacy/m.py", "pkg/old/m.py", "--force-exclude") == []


# --- rule selection -------------------------------------------------------------------------------------------------


def _enabled(stdout: str, key: str) -> set[str]:
    block = stdout.split(f"linter.rules.{key} = ", 1)[1].split("]", 1)[0]
    return set(re.findall(r"\(([A-Z]+[0-9]+)\)", block))


SELECTIONS = [
    ({}, ["--select", "SG103", "--ignore", "SG1"]),  # the case: the most specific selector wins
    ({}, ["--select", "SG1", "--ignore", "SG103"]),
    ({}, ["--select", "SG103", "--ignore", "SG103"]),  # equal specificity: ignore wins
    ({}, ["--select", "SG10", "--ignore", "SG1"]),
    ({}, ["--ignore", "SG1", "--extend-select", "SG103"]),
    ({}, ["--select", "ALL", "--ignore", "SG"]),
    ({}, ["--select", "SG", "--ignore", "ALL"]),
    ({}, ["--select", "SG2,SG101", "--select", "SG105"]),  # repeated options add up
    ({"select": ["SG103"]}, ["--ignore", "SG1"]),  # the command line's layer adjusts the configuration's
    ({"ignore": ["SG2"]}, ["--select", "SG2,SG102"]),  # ... and its `select` starts over
    ({"select": ["SG1"], "ignore": ["SG103"]}, ["--extend-select", "SG103"]),
    ({"select": [], "ignore": ["SG102"]}, ["--select", "SG1"]),  # `select = []` hands its ignores on
    ({"select": ["SG2"], "extend-select": ["SG101"], "ignore": ["SG20"]}, []),
    ({"unfixable": ["SG1"]}, ["--fixable", "SG102"]),
    ({"fixable": ["SG10"]}, ["--unfixable", "SG103", "--select", "SG1"]),
]


def _to_ruff(selectors: list[str]) -> list[str]:
    return [
        ",".join(RUFF_OF[s] for s in value.split(",")) if not value.startswith("--") else value for value in selectors
    ]


@pytest.mark.parametrize(("config", "args"), SELECTIONS, ids=[" ".join(a) or str(c) for c, a in SELECTIONS])
def test_selection_resolves_as_in_ruff(cli, tmp_path: Path, env, config: dict, args: list[str]) -> None:  # type: ignore[no-untyped-def]
    tree = tmp_path / "proj"
    ruff_table = "".join(f"{k} = {json.dumps([RUFF_OF[s] for s in v])}\n" for k, v in config.items())
    ours_table = "".join(f"{k} = {json.dumps(v)}\n" for k, v in config.items())
    write(tree, "pyproject.toml", text=f"[tool.ruff.lint]\n{ruff_table}\n[tool.specguard]\n{ours_table}")
    write(tree, "a.py")
    ours = cli("check", "--show-settings", "a.py", *args, cwd=tree, env=env)
    theirs = ruff("check", "--no-cache", "--show-settings", "a.py", *_to_ruff(args), cwd=tree, env=env)
    assert (ours.returncode, theirs.returncode) == (0, 0), ours.stderr + theirs.stderr
    for key in ("enabled", "should_fix"):
        mapped = {SPECGUARD_OF[c] for c in _enabled(theirs.stdout, key) if c in SPECGUARD_OF}
        assert _enabled(ours.stdout, key) - {"SG000", *UNMAPPED} == mapped, key


def test_select_most_specific_finds_what_it_selects(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    """The issue's case end to end: today both tools report the one selected rule's finding."""
    write(tmp_path, "late.py", text="import os\nfrom __future__ import annotations\n")  # F401 and F404
    theirs = ruff(
        *RUFF_JSON,
        "--select",
        "F404",
        "--ignore",
        "F4",
        "late.py",
        cwd=tmp_path,
        env=env,
    )
    ours = cli("check", str(EXAMPLES), "--output-format", "json", "--select", "SG103", "--ignore", "SG1", env=env)
    assert [i["code"] for i in json.loads(ours.stdout)] == ["SG103"]
    assert [i["code"] for i in json.loads(theirs.stdout)] == ["F404"]
    assert ours.returncode == theirs.returncode == 1


# --- output ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    """A folder for each tool with one file of two findings of different rules."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    write(ours, "spec.py", text=TWO_FINDINGS)
    write(theirs, "lint.py", text=RUFF_TWO_FINDINGS)
    return ours, theirs


def both(cli, pair, env, *args: str):  # type: ignore[no-untyped-def]
    """The same options for both tools on their own file; concise output unless the options say otherwise."""
    fmt = [] if any(a.startswith("--output-format") for a in args) else ["--output-format", "concise"]
    ours = cli("check", "--no-cache", "spec.py", *args, cwd=pair[0], env=env)
    theirs = ruff("check", "--no-cache", *fmt, *RUFF_TWO_RULES, "lint.py", *args, cwd=pair[1], env=env)
    return ours, theirs


def test_all_checks_passed_when_clean_and_quiet_or_silent_print_nothing(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path, "ok.py")
    for args, stdout in [([], "All checks passed!\n"), (["-q"], ""), (["-s"], ""), (["--statistics"], "")]:
        ours = cli("check", "--no-cache", "ok.py", *args, cwd=tmp_path, env=env)
        theirs = ruff("check", "--no-cache", "--output-format", "concise", "ok.py", *args, cwd=tmp_path, env=env)
        assert (ours.returncode, ours.stdout) == (theirs.returncode, theirs.stdout) == (0, stdout), args


def _shape(stdout: str) -> list[str]:
    """Output with the tool's own words taken out: the layout of finding lines and summary lines."""
    lines = []
    for line in stdout.splitlines():
        line = re.sub(r"^\S+\.py:\d+:\d+: [A-Z]+\d+ (\[\*\] )?.*$", r"FINDING \1", line)
        lines.append(line.replace("errors", "findings").replace("error", "finding"))
    return lines


def test_quiet_prints_the_findings_and_nothing_else(cli, pair, env) -> None:  # type: ignore[no-untyped-def]
    loud = both(cli, pair, env)
    assert _shape(loud[0].stdout) == _shape(loud[1].stdout)
    assert _shape(loud[0].stdout)[-2:] == ["Found 2 findings.", "[*] 1 fixable with `--fix`."]
    for flag in ("-q", "--quiet"):
        ours, theirs = both(cli, pair, env, flag)
        assert _shape(ours.stdout) == _shape(theirs.stdout) == ["FINDING ", "FINDING [*] "]
        assert ours.returncode == theirs.returncode == 1


def test_silent_prints_nothing_but_keeps_the_exit_code(cli, pair, env) -> None:  # type: ignore[no-untyped-def]
    for flag in ("-s", "--silent"):
        ours, theirs = both(cli, pair, env, "-o", "out.txt", flag)
        assert (ours.returncode, ours.stdout) == (theirs.returncode, theirs.stdout) == (1, "")
        assert (pair[0] / "out.txt").read_text() == (pair[1] / "out.txt").read_text() == ""


def test_exit_zero_keeps_the_report(cli, pair, env) -> None:  # type: ignore[no-untyped-def]
    for flag in ("-e", "--exit-zero"):
        ours, theirs = both(cli, pair, env, flag)
        assert ours.returncode == theirs.returncode == 0
        assert _shape(ours.stdout) == _shape(theirs.stdout) and "Found 2 findings." in ours.stdout
    # a missing path is a finding (ruff's E902, specguard's SG000), so --exit-zero covers it too
    ours = cli("check", "missing.py", "--exit-zero", cwd=pair[0], env=env)
    concise = ["--output-format", "concise", "--select", "E902"]
    theirs = ruff("check", "--no-cache", *concise, "missing.py", "--exit-zero", cwd=pair[1], env=env)
    assert ours.returncode == theirs.returncode == 0
    assert _shape(ours.stdout) == _shape(theirs.stdout) and "missing.py:1:1: SG000 " in ours.stdout


@pytest.mark.parametrize("spelling", [["--output-format", "json", "-o"], ["--output-format", "json", "--output-file"]])
def test_output_format_and_output_file_as_ruff_spells_them(cli, pair, env, spelling: list[str]) -> None:  # type: ignore[no-untyped-def]
    ours, theirs = both(cli, pair, env, *spelling, "report.json")
    assert (ours.returncode, ours.stdout) == (theirs.returncode, theirs.stdout) == (1, "")
    ours_report = json.loads((pair[0] / "report.json").read_text())
    theirs_report = json.loads((pair[1] / "report.json").read_text())
    assert [list(i) for i in ours_report] == [list(i) for i in theirs_report]  # ruff's keys, in ruff's order
    # specguard's older spellings still work
    old = cli("check", "spec.py", "--no-cache", "--format", "json", "--output", "old.json", cwd=pair[0], env=env)
    assert old.returncode == 1 and json.loads((pair[0] / "old.json").read_text()) == ours_report
    assert (
        cli("check", "spec.py", "--format", "text", cwd=pair[0], env=env).stdout
        == cli("check", "spec.py", "--output-format", "concise", cwd=pair[0], env=env).stdout
    )


def _statistics_shape(stdout: str) -> tuple[list[tuple[str, str]], list[str]]:
    rows, summary = [], []
    for line in stdout.splitlines():
        if match := re.fullmatch(r"( *\d+)\t([A-Z]+\d+ *)\t(\[.\] )?[a-z-]+", line):
            rows.append((match.group(1), match.group(3) or ""))
        else:
            summary.append(line.replace("errors", "findings").replace("error", "finding"))
    return sorted(rows), summary


def test_statistics_as_ruff_prints_them(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    """Count (right-aligned), code, tab-separated; `[*]` all fixable, `[ ]` none, no marker column where nothing
    is fixable; then the totals. Two findings of an unfixable rule, one safe fix, one unsafe fix on each side."""
    ours_dir, theirs_dir = tmp_path / "ours", tmp_path / "theirs"
    write(ours_dir, "spec.py", text=TWO_FINDINGS)
    write(ours_dir, "more.py", text=TWO_FINDINGS.replace("_build_attn_metadata", "_unrelated"))  # SG101 only
    write(ours_dir, "unsafe.py", text=UNSAFE_FIX)
    write(theirs_dir, "lint.py", text="import os\n\nl = 1\nI = 2\n\n\ndef f(x):\n    return x == None\n")
    select = ["--select", "E741,F401,E711"]
    for extra in ([], ["--unsafe-fixes"], ["--output-format", "json"]):
        ours = cli("check", "--no-cache", ".", "--statistics", *extra, cwd=ours_dir, env=env)
        theirs = ruff("check", "--no-cache", ".", "--statistics", *select, *extra, cwd=theirs_dir, env=env)
        assert ours.returncode == theirs.returncode == 1
        if "json" in extra:
            ours_rows, theirs_rows = json.loads(ours.stdout), json.loads(theirs.stdout)
            assert [list(r) for r in ours_rows] == [list(r) for r in theirs_rows]
            assert sorted((r["count"], r["fixable"], r["fixable_count"]) for r in ours_rows) == sorted(
                (r["count"], r["fixable"], r["fixable_count"]) for r in theirs_rows
            )
        else:
            assert _statistics_shape(ours.stdout) == _statistics_shape(theirs.stdout), extra
    # nothing fixable at all: no marker column, on either side
    ours = cli("check", "--no-cache", "more.py", "--statistics", cwd=ours_dir, env=env)
    theirs = ruff("check", "--no-cache", "lint.py", "--statistics", "--select", "E741", cwd=theirs_dir, env=env)
    assert _statistics_shape(ours.stdout)[0] == [("1", "")] and _statistics_shape(theirs.stdout)[0] == [("2", "")]


# one SG104 finding, whose fix is unsafe
UNSAFE_FIX = """\
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class S(DraftModelSpeculator):
    def propose(self, n):
        prepare_dcp_local_seq_lens(self.buf, self.seq_lens, n, 2, 0, 1)
        return self._build_attn_metadata(n, dcp_local_seq_lens=self.buf)
"""


# --- suppression ----------------------------------------------------------------------------------------------------

FILE_DIRECTIVES = [
    "# {tool}: noqa",
    "#{tool}:noqa",
    "# {tool}: NOQA",
    "    # {tool}: noqa",
    "# a comment # {tool}: noqa",
    "# {tool}: noqa {code}",  # no colon: every code
    "# {tool}: noqa: {code}",
    "# {tool}:  noqa:  {code} because of reasons",
    "# {tool}: noqa: {code}, XYZ999",
    "# {Tool}: noqa",  # the tool's name is lower case
    "# {tool}: noqa:",  # names no code: exempts nothing, with a warning
    "x = 1  # {tool}: noqa",  # after code: exempts nothing, with a warning
    '"""# {tool}: noqa"""',  # in a string: not a comment
]


@pytest.mark.parametrize("directive", FILE_DIRECTIVES)
def test_file_level_noqa_as_ruff_reads_it(cli, tmp_path: Path, env, directive: str) -> None:  # type: ignore[no-untyped-def]
    """Each directive on its own line in the middle of the file; the same codes stay on both sides."""
    ours_lines = TWO_FINDINGS.splitlines()
    ours_text = "\n".join([*ours_lines[:3], directive.format(tool="specguard", Tool="Specguard", code="SG101")])
    write(tmp_path, "ours/spec.py", text=ours_text + "\n" + "\n".join(ours_lines[3:]) + "\n")
    theirs_text = "import os\n" + directive.format(tool="ruff", Tool="Ruff", code="F401") + "\nl = 1\n"
    write(tmp_path, "theirs/lint.py", text=theirs_text)
    ours = cli("check", "--no-cache", "--output-format", "json", "spec.py", cwd=tmp_path / "ours", env=env)
    theirs = ruff(
        *RUFF_JSON,
        "--select",
        "F401,E741",
        "lint.py",
        cwd=tmp_path / "theirs",
        env=env,
    )
    ours_codes = [i["code"] for i in json.loads(ours.stdout)]
    theirs_codes = [{"F401": "SG101", "E741": "SG102"}[i["code"]] for i in json.loads(theirs.stdout)]
    assert ours_codes == theirs_codes
    assert ("warning" in ours.stderr) == ("warning" in theirs.stderr), (ours.stderr, theirs.stderr)


# --- commands -------------------------------------------------------------------------------------------------------


def test_explain_takes_a_rule_name_as_ruff_rule_does(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    assert (
        ruff("rule", "unused-import", cwd=tmp_path, env=env).stdout
        == ruff("rule", "F401", cwd=tmp_path, env=env).stdout
    )
    by_name = cli("explain", "padded-token-count", env=env)
    assert by_name.returncode == 0 and by_name.stdout == cli("explain", "SG103", env=env).stdout
    assert by_name.stdout.startswith("# padded-token-count (SG103)")
    assert cli("explain", "source-error", env=env).stdout.startswith("# source-error (SG000)")
    unknown, theirs = cli("explain", "padded-token"), ruff("rule", "unused-imports", cwd=tmp_path, env=env)
    assert unknown.returncode == theirs.returncode == 2
    assert unknown.stderr.strip() == (
        "specguard: error: unknown rule 'padded-token'; did you mean 'padded-token-count'? "
        "(`specguard rules` lists every code and name)"
    )


def test_show_settings_names_the_file_and_the_configuration(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path, "pyproject.toml", text="[tool.ruff]\n[tool.specguard]\n")
    write(tmp_path, "pkg/b.py", "pkg/a.py")
    ours = cli("check", "--show-settings", ".", cwd=tmp_path / "pkg", env=env)
    theirs = ruff("check", "--no-cache", "--show-settings", ".", cwd=tmp_path / "pkg", env=env)
    assert ours.returncode == theirs.returncode == 0
    assert (
        ours.stdout.splitlines()[:2]
        == theirs.stdout.splitlines()[:2]
        == [
            f'Resolved settings for: "{tmp_path / "pkg" / "a.py"}"',
            f'Settings path: "{tmp_path / "pyproject.toml"}"',
        ]
    )
    for line in ["file_resolver.respect_gitignore = true", "file_resolver.extend_exclude = []", "fix = false"]:
        assert line in ours.stdout.splitlines() and line in theirs.stdout.splitlines()
    assert cli("check", "--show-settings", "pkg", "--ignore", "SG", cwd=tmp_path, env=env).stdout.count("(SG") == 1


def test_clean_removes_the_caches_and_only_them(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    for project in ("one", "two/deeper"):
        write(tmp_path, f"{project}/pyproject.toml", text="[project]\nname = 'x'\n")
        write(tmp_path, f"{project}/spec.py", text=TWO_FINDINGS)
        assert cli("check", ".", cwd=tmp_path / project, env=env).returncode == 1
        ruff("check", ".", cwd=tmp_path / project, env=env)  # writes its cache, findings or not
        assert (tmp_path / project / ".ruff_cache").is_dir() and (tmp_path / project / ".specguard_cache").is_dir()
    kept = tmp_path / "one" / ".specguard_cache" / "notes.txt"
    kept.write_text("mine")
    elsewhere = tmp_path / "elsewhere"
    write(elsewhere, "precious.py")
    (tmp_path / "two" / ".specguard_cache").symlink_to(elsewhere)  # a cache folder that is a link: left alone

    ours = cli("clean", cwd=tmp_path, env=env)
    theirs = ruff("clean", cwd=tmp_path, env=env)
    assert ours.returncode == theirs.returncode == 0
    removed = sorted(line for line in ours.stderr.splitlines() if line.startswith("Removing cache at: "))
    assert removed == ["Removing cache at: two/deeper/.specguard_cache"]
    assert sorted(line.replace(".ruff_cache", "X") for line in theirs.stderr.splitlines()) == [
        "Removing cache at: one/X",
        "Removing cache at: two/deeper/X",
    ]
    assert not (tmp_path / "two" / "deeper" / ".specguard_cache").exists()
    assert kept.read_text() == "mine" and [p.name for p in kept.parent.iterdir()] == ["notes.txt"]
    assert (elsewhere / "precious.py").exists()
    assert "specguard: warning: one/.specguard_cache/notes.txt: not written by specguard; left alone" in ours.stderr
    assert "specguard: warning: two/.specguard_cache: not a folder (a link?); left alone" in ours.stderr
    assert cli("clean", "-q", cwd=tmp_path, env=env).stderr.count("Removing") == 0
