"""What editors, pre-commit hooks and CI steps expect of a ruff-like checker (issue 32), each run beside the real ruff
of the test environment on files of the same shape: standard input, a missing path, `--add-noqa`, stub files,
`--show-fixes` and `--exit-non-zero-on-fix`. See test_ruff_habits.py for the pairing of codes (SG101 ~ E741, no fix;
SG102 ~ F401, a safe fix)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_ruff_habits import RUFF_TWO_FINDINGS, RUFF_TWO_RULES, TWO_FINDINGS, _shape, env, ruff, write

__all__ = ["env"]  # the fixture, shared with test_ruff_habits.py


def piped(tool: str, *args: str, data: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`specguard` or `ruff` with `data` on standard input."""
    command = ["-m", "specguard"] if tool == "specguard" else ["-m", "ruff"]
    return subprocess.run(
        [sys.executable, *command, *args],
        input=data,
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )


def both_piped(tmp_path: Path, env: dict[str, str], *args: str, name: str | None) -> tuple:
    """Each tool on standard input holding its own two findings, as the file `name` of an empty project (or `-`)."""
    ours_dir, theirs_dir = tmp_path / "ours", tmp_path / "theirs"
    ours_dir.mkdir(exist_ok=True)
    theirs_dir.mkdir(exist_ok=True)
    named = ["-", "--stdin-filename", name] if name else ["-"]
    ours = piped("specguard", "check", "--no-cache", *named, *args, data=TWO_FINDINGS, cwd=ours_dir, env=env)
    fmt = [] if "--output-format" in args else ["--output-format", "concise"]
    theirs_args = ["check", "--no-cache", *fmt, *RUFF_TWO_RULES, *named, *args]
    theirs = piped("ruff", *theirs_args, data=RUFF_TWO_FINDINGS, cwd=theirs_dir, env=env)
    return ours, theirs


@pytest.mark.parametrize("name", [None, "sub/module.py"])
def test_standard_input_is_checked_as_the_named_file(tmp_path: Path, env, name: str | None) -> None:  # type: ignore[no-untyped-def]
    ours, theirs = both_piped(tmp_path, env, name=name)
    assert ours.returncode == theirs.returncode == 1
    shown = name or "-"
    assert _shape(ours.stdout.replace(f"{shown}:", "x.py:")) == _shape(theirs.stdout.replace(f"{shown}:", "x.py:"))
    assert [line.split(" ")[0] for line in ours.stdout.splitlines()[:2]] == [f"{shown}:7:16:", f"{shown}:9:9:"]


def test_the_stdin_filename_alone_reads_standard_input_as_ruff_does(tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    ours = piped("specguard", "check", "--stdin-filename", "a.py", data=TWO_FINDINGS, cwd=tmp_path, env=env)
    theirs = piped("ruff", "check", "--output-format", "concise", *RUFF_TWO_RULES, "--stdin-filename", "a.py",
                   data=RUFF_TWO_FINDINGS, cwd=tmp_path, env=env)  # fmt: skip
    assert ours.returncode == theirs.returncode == 1
    assert _shape(ours.stdout) == _shape(theirs.stdout) and ours.stdout.startswith("a.py:7:")


def test_standard_input_takes_the_per_file_ignores_of_its_name(tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "ours").mkdir()
    (tmp_path / "theirs").mkdir()
    (tmp_path / "ours" / "pyproject.toml").write_text('[tool.specguard.per-file-ignores]\n"sub/*" = ["SG101"]\n')
    (tmp_path / "theirs" / "pyproject.toml").write_text('[tool.ruff.lint.per-file-ignores]\n"sub/*" = ["E741"]\n')
    ignored = both_piped(tmp_path, env, name="sub/module.py")
    kept = both_piped(tmp_path, env, name="other/module.py")
    assert _shape(ignored[0].stdout) == _shape(ignored[1].stdout) and len(_shape(ignored[0].stdout)) == 3
    assert "SG101" not in ignored[0].stdout and "SG102" in ignored[0].stdout
    assert _shape(kept[0].stdout) == _shape(kept[1].stdout) and "SG101" in kept[0].stdout


def test_fix_on_standard_input_writes_the_fixed_source_to_stdout_and_the_report_to_stderr(tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    ours, theirs = both_piped(tmp_path, env, "--fix", name="module.py")
    assert ours.returncode == theirs.returncode == 1  # SG101 / E741 remain
    assert "_build_attn_metadata" not in ours.stdout and "build_attn_metadata(num_reqs=num_reqs)" in ours.stdout
    assert theirs.stdout == "l = 1\n" and ours.stdout == TWO_FINDINGS[: TWO_FINDINGS.index("\n\n    def _build")] + "\n"
    assert "Found 2 findings (1 fixed, 1 remaining)." in ours.stderr
    assert "Found 2 errors (1 fixed, 1 remaining)." in theirs.stderr
    assert not list((tmp_path / "ours").iterdir())  # nothing written anywhere


def test_an_excluded_stdin_filename_is_skipped_under_force_exclude(tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    args = ("--force-exclude", "--exclude", "build")
    ours, theirs = both_piped(tmp_path, env, *args, name="build/module.py")
    assert (ours.returncode, ours.stdout) == (theirs.returncode, theirs.stdout) == (0, "All checks passed!\n")
    ours, theirs = both_piped(tmp_path, env, *args, "--fix", name="build/module.py")
    assert (ours.returncode, theirs.returncode) == (0, 0)
    assert (ours.stdout, theirs.stdout) == (TWO_FINDINGS, RUFF_TWO_FINDINGS)  # the editor's buffer, unchanged


def test_options_that_need_files_refuse_standard_input(tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    out = piped("specguard", "check", "-", "--add-noqa", data=TWO_FINDINGS, cwd=tmp_path, env=env)
    assert out.returncode == 2 and out.stderr.startswith("specguard: error: --add-noqa works on files")


def test_a_missing_path_is_a_finding_beside_the_other_paths_findings(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path / "ours", "spec.py", text=TWO_FINDINGS)
    write(tmp_path / "theirs", "lint.py", text=RUFF_TWO_FINDINGS)
    ours = cli("check", "--no-cache", "spec.py", "zmissing.py", cwd=tmp_path / "ours", env=env)
    rules = ["--select", "E741,F401,E902"]
    theirs = ruff("check", "--no-cache", "--output-format", "concise", *rules, "lint.py", "zmissing.py",
                  cwd=tmp_path / "theirs", env=env)  # fmt: skip
    assert ours.returncode == theirs.returncode == 1
    assert _shape(ours.stdout) == _shape(theirs.stdout)  # three findings, no "All checks passed!"
    assert "zmissing.py:1:1: SG000 no such file or directory" in ours.stdout.splitlines()


CALL = "return build_attn_metadata(num_reqs=num_reqs)"  # TWO_FINDINGS' line 7, SG101
NOQA_OURS = TWO_FINDINGS.replace(CALL, CALL + "  # noqa: E501")
NOQA_THEIRS = "l = 1  # noqa: E501\nimport os  # a comment\n"


def test_add_noqa_writes_ruffs_comments(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path / "ours", "spec.py", text=NOQA_OURS)
    write(tmp_path / "theirs", "lint.py", text=NOQA_THEIRS)
    ours = cli("check", "--no-cache", "spec.py", "--add-noqa", cwd=tmp_path / "ours", env=env)
    theirs = ruff("check", "--no-cache", *RUFF_TWO_RULES, "lint.py", "--add-noqa", cwd=tmp_path / "theirs", env=env)
    assert ours.returncode == theirs.returncode == 0
    assert ours.stderr == theirs.stderr == "Added 2 noqa directives.\n"
    ours_lines = (tmp_path / "ours" / "spec.py").read_text().splitlines()
    theirs_lines = (tmp_path / "theirs" / "lint.py").read_text().splitlines()
    # merged into the line's noqa comment; appended after two spaces, after any other comment
    assert theirs_lines == ["l = 1  # noqa: E501, E741", "import os  # a comment  # noqa: F401"]
    assert ours_lines[6].endswith("(num_reqs=num_reqs)  # noqa: E501, SG101")
    assert ours_lines[8] == "    def _build_attn_metadata(self, *args, **kwargs):  # noqa: SG102"
    assert cli("check", "--no-cache", "spec.py", cwd=tmp_path / "ours", env=env).stdout == "All checks passed!\n"


def test_a_finding_on_a_line_that_ends_in_a_string_is_silenced_where_ruff_reads_it(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    """ruff's noqa_row: where the finding's line ends inside a string (or continues), the comment goes on the line
    that ends it; JSON says so, --add-noqa writes it there, and the comment there silences the finding."""
    ours_text = TWO_FINDINGS.replace(CALL, CALL[:-1] + ', note="""\n""")')
    write(tmp_path / "ours", "spec.py", text=ours_text)
    write(tmp_path / "theirs", "lint.py", text='l = f("""\n""")\nimport os; x = \\\n  1\n')
    ours = cli("check", "--no-cache", "spec.py", "--output-format", "json", cwd=tmp_path / "ours", env=env)
    theirs = ruff("check", "--no-cache", *RUFF_TWO_RULES, "lint.py", "--output-format", "json",
                  cwd=tmp_path / "theirs", env=env)  # fmt: skip
    rows = [(f["location"]["row"], f["noqa_row"]) for f in json.loads(ours.stdout)]
    assert rows == [(7, 8), (10, 10)]  # SG101 on the call whose string ends on line 8; SG102 on its own line
    assert [(f["location"]["row"], f["noqa_row"]) for f in json.loads(theirs.stdout)] == [(1, 2), (3, 4)]
    ours = cli("check", "--no-cache", "spec.py", "--add-noqa", cwd=tmp_path / "ours", env=env)
    theirs = ruff("check", "--no-cache", *RUFF_TWO_RULES, "lint.py", "--add-noqa", cwd=tmp_path / "theirs", env=env)
    assert ours.stderr == theirs.stderr == "Added 2 noqa directives.\n"
    assert (
        tmp_path / "theirs" / "lint.py"
    ).read_text() == 'l = f("""\n""")  # noqa: E741\nimport os; x = \\\n  1  # noqa: F401\n'
    written = (tmp_path / "ours" / "spec.py").read_text().splitlines()
    assert written[7] == '""")  # noqa: SG101' and written[9].endswith("**kwargs):  # noqa: SG102")
    assert cli("check", "--no-cache", "spec.py", cwd=tmp_path / "ours", env=env).stdout == "All checks passed!\n"
    # nothing left to add: nothing said, as ruff
    ours = cli("check", "--no-cache", "spec.py", "--add-noqa", cwd=tmp_path / "ours", env=env)
    theirs = ruff("check", "--no-cache", *RUFF_TWO_RULES, "lint.py", "--add-noqa", cwd=tmp_path / "theirs", env=env)
    assert (ours.returncode, ours.stderr) == (theirs.returncode, theirs.stderr) == (0, "")


def test_add_noqa_rewrites_a_noqa_comment_as_ruff_does_and_a_spaced_colon_silences(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path / "ours", "spec.py", text=TWO_FINDINGS.replace(CALL, CALL + "  # noqa:W291,E501"))
    write(tmp_path / "theirs", "lint.py", text="l = 1  # noqa:W291,E501\n")
    cli("check", "--no-cache", "spec.py", "--select", "SG101", "--add-noqa", cwd=tmp_path / "ours", env=env)
    ruff("check", "--no-cache", "--select", "E741", "lint.py", "--add-noqa", cwd=tmp_path / "theirs", env=env)
    assert (tmp_path / "theirs" / "lint.py").read_text() == "l = 1  # noqa: E501, E741, W291\n"
    assert (tmp_path / "ours" / "spec.py").read_text().splitlines()[6].endswith(CALL + "  # noqa: E501, SG101, W291")
    write(tmp_path / "ours", "spaced.py", text=TWO_FINDINGS.replace(CALL, CALL + "  # noqa : SG101"))
    write(tmp_path / "theirs", "spaced.py", text="l = 1  # noqa : E741\n")
    ours = cli("check", "--no-cache", "spaced.py", "--select", "SG101", cwd=tmp_path / "ours", env=env)
    theirs = ruff("check", "--no-cache", "--select", "E741", "spaced.py", cwd=tmp_path / "theirs", env=env)
    assert ours.stdout == theirs.stdout == "All checks passed!\n"


def test_unnamed_standard_input_is_named_dash_in_json_as_ruff(tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    ours, theirs = both_piped(tmp_path, env, "--output-format", "json", name=None)
    assert (
        {f["filename"] for f in json.loads(ours.stdout)} == {f["filename"] for f in json.loads(theirs.stdout)} == {"-"}
    )


def test_standard_input_over_the_cap_is_a_finding_and_fix_gives_it_back_whole(tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    huge = "x = 1\n" * 3_000_000  # 18 MB, past the 16 MiB source cap
    out = piped("specguard", "check", "-", data=huge, cwd=tmp_path, env=env)
    assert out.returncode == 1 and out.stdout.startswith("-:1:1: SG000 standard input holds more than")
    out = piped("specguard", "check", "-", "--fix", data=huge, cwd=tmp_path, env=env)
    assert out.returncode == 1 and out.stdout == huge and "SG000" in out.stderr


def test_the_report_file_gets_its_missing_folders_as_ruffs(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path / "ours", "spec.py", text=TWO_FINDINGS)
    write(tmp_path / "theirs", "lint.py", text=RUFF_TWO_FINDINGS)
    for where in ("reports/ci/out.txt", str(tmp_path / "outside" / "deep" / "out.txt")):
        ours = cli("check", "--no-cache", "spec.py", "-o", where, cwd=tmp_path / "ours", env=env)
        theirs = ruff("check", "--no-cache", *RUFF_TWO_RULES, "lint.py", "-o", where.replace("out", "ruff"),
                      cwd=tmp_path / "theirs", env=env)  # fmt: skip
        assert ours.returncode == theirs.returncode == 1
        assert "SG101" in (tmp_path / "ours" / where).read_text()


def test_paths_of_projects_with_different_settings_are_refused_whatever_their_order(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    """One run checks with one project's settings, so paths whose projects' settings differ are refused, in either
    order, where checking them with the first one's made the result depend on it. A pyproject.toml without
    [tool.specguard] is a project of its own (the security contract: a monorepo's outer settings never reach it)."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.specguard]\nextend-exclude = ["legacy"]\n')
    write(tmp_path, "aaa/pyproject.toml", text='[project]\nname = "a"\n')
    write(tmp_path, "aaa/spec.py", "legacy/spec.py", "other/spec.py", text=TWO_FINDINGS)
    for order in (["aaa/spec.py", "legacy/spec.py"], ["legacy/spec.py", "aaa/spec.py"]):
        out = cli("check", "--no-cache", "--force-exclude", *order, cwd=tmp_path, env=env)
        assert out.returncode == 2 and "are checked with different settings" in out.stderr
    for order in (["other/spec.py", "legacy/spec.py"], ["legacy/spec.py", "other/spec.py"]):  # one project
        out = cli("check", "--no-cache", "--force-exclude", *order, cwd=tmp_path, env=env)
        assert out.returncode == 1 and "other/spec.py:7:16: SG101" in out.stdout and "legacy/" not in out.stdout


def test_stub_files_in_folders_are_checked_as_ruff_checks_them(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path, "pkg/module.py", "pkg/module.pyi", "pkg/notes.txt")
    ours = cli("check", "pkg", "--show-files", cwd=tmp_path, env=env)
    theirs = ruff("check", "pkg", "--show-files", cwd=tmp_path, env=env)
    assert ours.stdout == theirs.stdout and ours.stdout.count("\n") == 2 and "module.pyi" in ours.stdout
    write(tmp_path, "stubs/spec.pyi", text=TWO_FINDINGS)
    out = cli("check", "--no-cache", "stubs", cwd=tmp_path, env=env)
    assert out.returncode == 1 and "stubs/spec.pyi:7:16: SG101" in out.stdout


ONLY_FIXABLE = TWO_FINDINGS.replace(
    "    def propose(self, num_reqs):\n        return build_attn_metadata(num_reqs=num_reqs)\n\n", ""
)


@pytest.mark.parametrize("flag", [[], ["--exit-non-zero-on-fix"]])
def test_exit_non_zero_on_fix_counts_the_fixes_made(cli, tmp_path: Path, env, flag: list[str]) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path / "ours", "spec.py", text=ONLY_FIXABLE)
    write(tmp_path / "theirs", "lint.py", text="import os\n")
    ours = cli("check", "--no-cache", "spec.py", "--fix", *flag, cwd=tmp_path / "ours", env=env)
    theirs = ruff("check", "--no-cache", "--output-format", "concise", "--select", "F401", "lint.py", "--fix", *flag,
                  cwd=tmp_path / "theirs", env=env)  # fmt: skip
    assert ours.returncode == theirs.returncode == (1 if flag else 0)
    assert _shape(ours.stdout) == _shape(theirs.stdout) == ["Found 1 finding (1 fixed, 0 remaining)."]


@pytest.mark.parametrize("extra", [[], ["-q"]])
def test_show_fixes_lists_the_fixes_made_as_ruff_does(cli, tmp_path: Path, env, extra: list[str]) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path / "ours", "spec.py", text=TWO_FINDINGS)
    write(tmp_path / "theirs", "lint.py", text=RUFF_TWO_FINDINGS)
    args = ["--fix", "--show-fixes", *extra]
    ours = cli("check", "--no-cache", "spec.py", *args, cwd=tmp_path / "ours", env=env)
    theirs = ruff("check", "--no-cache", "--output-format", "concise", *RUFF_TWO_RULES, "lint.py", *args,
                  cwd=tmp_path / "theirs", env=env)  # fmt: skip
    assert ours.returncode == theirs.returncode == 1  # SG101 / E741 left
    assert _shape(ours.stdout.replace("spec.py", "x.py")) == _shape(
        theirs.stdout.replace("lint.py", "x.py").replace("F401 (unused-import)", "SG102 (helper-override)")
    )
    assert "- spec.py:\n    1 \u00d7 SG102 (helper-override)\n" in ours.stdout


def test_show_fixes_on_standard_input_goes_with_the_report_to_stderr(tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    ours, theirs = both_piped(tmp_path, env, "--fix", "--show-fixes", name="module.py")
    assert "Fixed 1 finding:\n- module.py:\n    1 \u00d7 SG102" in ours.stderr
    assert "Fixed 1 error:\n- module.py:\n    1 \u00d7 F401" in theirs.stderr


def test_a_stdin_filename_with_paths_reads_standard_input_and_says_so(tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path, "disk.py")
    ours = piped("specguard", "check", "disk.py", "--stdin-filename", "a.py", data=TWO_FINDINGS, cwd=tmp_path, env=env)
    theirs = piped("ruff", "check", "--output-format", "concise", *RUFF_TWO_RULES, "disk.py", "--stdin-filename",
                   "a.py", data=RUFF_TWO_FINDINGS, cwd=tmp_path, env=env)  # fmt: skip
    assert ours.returncode == theirs.returncode == 1
    assert _shape(ours.stdout) == _shape(theirs.stdout) and ours.stdout.startswith("a.py:7:")
    assert "ignoring disk.py in favor of standard input" in ours.stderr
    assert "Ignoring file disk.py in favor of standard input" in theirs.stderr


def test_an_unselected_source_error_is_a_warning_as_ruffs_unselected_e902(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path, "ok.py")
    ours = cli("check", "--no-cache", "--select", "SG101", "ok.py", "missing.py", cwd=tmp_path, env=env)
    theirs = ruff("check", "--no-cache", "--output-format", "concise", "--select", "F401", "ok.py", "missing.py",
                  cwd=tmp_path, env=env)  # fmt: skip
    assert (ours.returncode, ours.stdout) == (theirs.returncode, theirs.stdout) == (0, "All checks passed!\n")
    assert "missing.py: not checked: no such file or directory (SG000 is not selected)" in ours.stderr
    assert "Failed to lint missing.py" in theirs.stderr
    ours = cli("check", "--no-cache", "--select", "SG000", "ok.py", "missing.py", cwd=tmp_path, env=env)
    assert ours.returncode == 1 and "missing.py:1:1: SG000 " in ours.stdout  # SG000 alone is a selection


def test_a_broken_link_met_in_a_folder_is_a_finding_as_ruffs_e902(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path, "pkg/ok.py")
    os.symlink("nowhere.py", tmp_path / "pkg" / "dangling.py")
    ours = cli("check", "--no-cache", "pkg", cwd=tmp_path, env=env)
    theirs = ruff("check", "--no-cache", "--output-format", "concise", "pkg", cwd=tmp_path, env=env)
    assert ours.returncode == theirs.returncode == 1
    assert _shape(ours.stdout) == _shape(theirs.stdout)
    assert ours.stdout.startswith("pkg/dangling.py:1:1: SG000 not a file or directory")


def test_no_python_files_is_said_and_show_files_leaves_a_missing_path_out(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "empty").mkdir()
    ours = cli("check", "--no-cache", "empty", cwd=tmp_path, env=env)
    theirs = ruff("check", "--no-cache", "--output-format", "concise", "empty", cwd=tmp_path, env=env)
    assert (ours.returncode, ours.stdout) == (theirs.returncode, theirs.stdout) == (0, "All checks passed!\n")
    assert "no Python files found under the given paths" in ours.stderr
    assert "No Python files found under the given path(s)" in theirs.stderr
    write(tmp_path, "ok.py")
    ours = cli("check", "--show-files", "ok.py", "missing.py", cwd=tmp_path, env=env)
    theirs = ruff("check", "--show-files", "ok.py", "missing.py", cwd=tmp_path, env=env)
    assert (ours.returncode, ours.stdout) == (theirs.returncode, theirs.stdout) == (0, f"{tmp_path / 'ok.py'}\n")


def test_diff_prints_the_patch_under_silent_too_and_its_count_as_ruff(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path / "ours", "spec.py", text=ONLY_FIXABLE)
    write(tmp_path / "theirs", "lint.py", text="import os\n")
    for flag in ([], ["-s"], ["-q"]):
        ours = cli("check", "--no-cache", "spec.py", "--diff", *flag, cwd=tmp_path / "ours", env=env)
        theirs = ruff("check", "--no-cache", "--select", "F401", "lint.py", "--diff", *flag, cwd=tmp_path / "theirs",
                      env=env)  # fmt: skip
        assert ours.returncode == theirs.returncode == 1
        assert ours.stdout.startswith("--- spec.py\n+++ spec.py\n") and theirs.stdout.startswith("--- lint.py\n")
        assert ours.stdout.endswith("\n\nWould fix 1 finding.\n") == theirs.stdout.endswith("\n\nWould fix 1 error.\n")
        assert ours.stdout.endswith("\n\n") == theirs.stdout.endswith("\n\n") == bool(flag)
    ours, theirs = both_piped(tmp_path, env, "--diff", name="module.py")  # standard input: the count on stderr
    assert "Would fix 1 finding." in ours.stderr and "Would fix 1 error." in theirs.stderr


def test_the_output_format_comes_from_the_environment_or_the_settings_as_ruffs(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path / "ours", "spec.py", text=TWO_FINDINGS)
    write(tmp_path / "theirs", "lint.py", text=RUFF_TWO_FINDINGS)
    pylint = {**env, "SPECGUARD_OUTPUT_FORMAT": "pylint", "RUFF_OUTPUT_FORMAT": "pylint"}
    ours = cli("check", "--no-cache", "spec.py", cwd=tmp_path / "ours", env=pylint)
    theirs = ruff("check", "--no-cache", *RUFF_TWO_RULES, "lint.py", cwd=tmp_path / "theirs", env=pylint)
    heads = [line.split(" ")[:2] for line in ours.stdout.splitlines()]
    assert heads == [["spec.py:7:", "[SG101]"], ["spec.py:9:", "[SG102]"]]
    heads = [line.split(" ")[:2] for line in theirs.stdout.splitlines()]
    assert heads == [["lint.py:1:", "[E741]"], ["lint.py:2:", "[F401]"]]
    (tmp_path / "ours" / "pyproject.toml").write_text('[tool.specguard]\noutput-format = "grouped"\n')
    assert cli("check", "--no-cache", "spec.py", cwd=tmp_path / "ours", env=env).stdout.startswith("spec.py:\n")
    out = cli("check", "--no-cache", "spec.py", cwd=tmp_path / "ours", env={**env, "SPECGUARD_OUTPUT_FORMAT": "xml"})
    assert out.returncode == 2 and "SPECGUARD_OUTPUT_FORMAT 'xml': not an output format" in out.stderr


def test_version_and_rule_subcommands_as_ruffs(cli, tmp_path: Path, env) -> None:  # type: ignore[no-untyped-def]
    assert cli("version", cwd=tmp_path, env=env).stdout == cli("--version", cwd=tmp_path, env=env).stdout
    assert cli("rule", "SG102", cwd=tmp_path, env=env).stdout == cli("explain", "SG102", cwd=tmp_path, env=env).stdout
    assert ruff("version", cwd=tmp_path, env=env).returncode == ruff("rule", "F401", cwd=tmp_path, env=env).returncode
