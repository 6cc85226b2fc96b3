"""Class 8: file and folder names that are not UTF-8 or hold control characters, in every output format, on
stdout and in `-o FILE`, `--statistics`, `--show-files`, `--show-settings`, `--diff` and the notes on stderr,
under LANG=C / PYTHONIOENCODING=ascii / strict UTF-8."""

import json
import os
import urllib.parse

from sg2harness import (
    SG101_SRC,
    SG201_SRC,
    assert_good_findings,
    assert_no_crash,
    make_project,
    run_cli,
)

ASCII_ENV = {"LANG": "C", "LC_ALL": "C", "PYTHONIOENCODING": "ascii"}
STRICT_ENV = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8:strict"}
TERMINAL_BAD = (b"\x1b", b"\x07", b"\r", b"\x9b", b"\x00")


def add_file(root, name: bytes, data):
    path = os.path.join(os.fsencode(root), b"pkg", name)
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return path


def no_terminal_controls(data: bytes, what):
    for b in TERMINAL_BAD:
        assert b not in data, f"{what}: raw {b!r} written: {data[-2000:]!r}"


def test_non_utf8_name_in_every_format(work):
    """CLASS 8: a speculator file named `bad\\xff.py` (not UTF-8) with an SG101 finding, under LANG=C and PYTHONIOENCODING=ascii. EXPECT: rc 1 in every format, no traceback; concise and github write `\\xff` escaped (ASCII only on stdout); json's filename turns back into the exact bytes with os.fsencode; SARIF's uri percent-decodes to those bytes."""
    root = make_project(work / "proj")
    add_file(root, b"bad\xff.py", SG101_SRC.replace("MyDraftSpeculator", "BadName"))
    want = b"pkg/bad\xff.py"
    for fmt in ("concise", "json", "sarif", "github"):
        res = run_cli(["check", ".", "--output-format", fmt], root, env=ASCII_ENV)
        assert_no_crash(res, (1,))
        assert all(b < 0x80 for b in res.out), f"{fmt}: non-ASCII bytes on an ASCII stdout: {res!r}"
        if fmt in ("concise", "github"):
            assert b"bad\\xff.py" in res.out, f"{fmt}: the name is not written as bad\\xff.py: {res!r}"
        elif fmt == "json":
            names = [os.fsencode(f["filename"]) for f in json.loads(res.out)]
            assert any(n.endswith(want) for n in names), f"json: no filename maps back to {want!r}: {names!r}"
        else:
            sarif = json.loads(res.out)
            uris = [
                loc["physicalLocation"]["artifactLocation"]["uri"]
                for run in sarif["runs"]
                for result in run["results"]
                for loc in result["locations"]
            ]
            assert any(urllib.parse.unquote_to_bytes(u).endswith(want) for u in uris), f"sarif uris: {uris!r}"


def test_control_characters_in_names_stay_one_line(work):
    """CLASS 8: a speculator file named `a\\nb\\x1b[31mc\\r.py` (newline, ESC, CR) with an SG101 finding. EXPECT: rc 1; in concise and github output exactly one line per finding (4 findings: 4 lines starting with the path or `::`), no raw ESC or CR anywhere on stdout or stderr; json still parses and names the exact bytes."""
    root = make_project(work / "proj")
    name = b"a\nb\x1b[31mc\r.py"
    add_file(root, name, SG101_SRC.replace("MyDraftSpeculator", "Ctl"))
    res = run_cli(["check", ".", "--output-format", "concise"], root)
    assert_no_crash(res, (1,))
    no_terminal_controls(res.out + res.err, "concise")
    finding_lines = [ln for ln in res.out.split(b"\n") if ln.startswith(b"pkg/")]
    assert len(finding_lines) == 4, f"expected 4 one-line findings, got {finding_lines!r}"
    gh = run_cli(["check", ".", "--output-format", "github"], root)
    assert_no_crash(gh, (1,))
    no_terminal_controls(gh.out + gh.err, "github")
    lines = [ln for ln in gh.out.split(b"\n") if ln.strip()]
    assert len(lines) == 4 and all(ln.startswith(b"::") for ln in lines), f"github lines: {lines!r}"
    js = run_cli(["check", ".", "--output-format", "json"], root)
    assert any(os.fsencode(f["filename"]).endswith(b"pkg/" + name) for f in json.loads(js.out)), js


def test_github_workflow_command_injection_by_name(work):
    """CLASS 8: a file named `x\\n::warning file=evil.py,line=1::injected\\n::add-mask::secret.py` (newlines followed by other workflow commands) with an SG101 finding, output as `--output-format github`. EXPECT: rc 1; exactly 4 lines, each an `::error` command; no line starts with `::warning` or `::add-mask`."""
    root = make_project(work / "proj")
    add_file(root, b"x\n::warning file=evil.py,line=1::injected\n::add-mask::secret.py", SG101_SRC)
    res = run_cli(["check", ".", "--output-format", "github"], root)
    assert_no_crash(res, (1,))
    lines = [ln for ln in res.out.split(b"\n") if ln.strip()]
    assert len(lines) == 4, f"expected 4 annotations, got {lines!r}"
    assert all(ln.startswith(b"::error") for ln in lines), f"an injected workflow command: {lines!r}"


def test_show_files_settings_statistics_in_odd_root(work):
    """CLASS 8: the project's root folder is named `proj\\n\\x1b]0;t\\x07\\xff` (newline, OSC escape, BEL, non-UTF-8), under PYTHONIOENCODING=ascii. EXPECT: `--show-files` prints exactly 3 lines (one per file), `--show-settings` and `--statistics` run (rc 0, 0 and 1), and no raw ESC/BEL/CR/0xff byte appears on stdout or stderr; no traceback."""
    broot = os.path.join(os.fsencode(work), b"proj\n\x1b]0;t\x07\xff")
    root = make_project(os.fsdecode(broot))
    res = run_cli(["check", ".", "--show-files"], root, env=ASCII_ENV)
    assert_no_crash(res, (0,))
    no_terminal_controls(res.out + res.err, "--show-files")
    assert b"\xff" not in res.out
    lines = [ln for ln in res.out.split(b"\n") if ln.strip()]
    assert len(lines) == 3, f"--show-files: expected 3 lines, got {lines!r}"
    res = run_cli(["check", ".", "--show-settings"], root, env=ASCII_ENV)
    assert_no_crash(res, (0,))
    no_terminal_controls(res.out + res.err, "--show-settings")
    assert b"\xff" not in res.out
    res = run_cli(["check", ".", "--statistics"], root, env=ASCII_ENV)
    assert_no_crash(res, (1,))
    no_terminal_controls(res.out + res.err, "--statistics")


def test_diff_headers_with_odd_names(work):
    """CLASS 8: the fixable merge file is named `m\\xfe\\x1b[2J\\n.py`; `--diff` prints its headers. EXPECT: rc 1; exactly one `--- ` and one `+++ ` header line, no raw 0xfe, ESC or CR on stdout/stderr; the file is not changed; no traceback."""
    root = make_project(work / "proj")
    os.unlink(root / "pkg" / "merge.py")
    path = add_file(root, b"m\xfe\x1b[2J\n.py", SG201_SRC)
    res = run_cli(["check", ".", "--diff"], root)
    assert_no_crash(res, (1,))
    no_terminal_controls(res.out + res.err, "--diff")
    assert b"\xfe" not in res.out, res
    lines = res.out.split(b"\n")
    assert sum(ln.startswith(b"--- ") for ln in lines) == 1 and sum(ln.startswith(b"+++ ") for ln in lines) == 1, res
    assert open(path, "rb").read() == SG201_SRC.encode()


def test_output_file_with_odd_name(work):
    """CLASS 8: `-o` names a report file `rep\\xff\\n.sarif` (non-UTF-8 and a newline) and the tree holds `bad\\xff.py`. EXPECT: rc 1; exactly that file is created in the current folder, holding valid SARIF whose uri percent-decodes to `pkg/bad\\xff.py`; stdout carries no report; no traceback."""
    root = make_project(work / "proj")
    add_file(root, b"bad\xff.py", SG101_SRC.replace("MyDraftSpeculator", "BadName"))
    out = b"rep\xff\n.sarif"
    res = run_cli(["check", "pkg", "--output-format", "sarif", "-o", out], root)
    assert_no_crash(res, (1,))
    created = set(os.listdir(os.fsencode(root))) - {b".git", b"pkg", b".specguard_cache"}
    assert created == {out}, f"report files created: {created!r}"
    sarif = json.load(open(os.path.join(os.fsencode(root), out), "rb"))
    uris = [
        loc["physicalLocation"]["artifactLocation"]["uri"]
        for run in sarif["runs"]
        for result in run["results"]
        for loc in result["locations"]
    ]
    assert any(urllib.parse.unquote_to_bytes(u).endswith(b"pkg/bad\xff.py") for u in uris), uris


def test_notes_on_stderr_with_odd_names_strict_utf8(work):
    """CLASS 8: under PYTHONIOENCODING=utf-8:strict, the tree holds `\\x1b]0;pwn\\x07bad\\xff.py` (NUL bytes: SG000), a link `link\\x1b\\xfe` -> `/` (a link out: a note), and a FIFO `\\x9bfifo.py`. EXPECT: rc 1, no traceback (no UnicodeEncodeError); no raw ESC, BEL, 0x9b or 0xfe/0xff byte on stdout or stderr; the good files' findings are reported."""
    root = make_project(work / "proj")
    add_file(root, b"\x1b]0;pwn\x07bad\xff.py", b"import build_attn_metadata\x00\x00\n")
    os.symlink(b"/", os.path.join(os.fsencode(root), b"pkg", b"link\x1b\xfe"))
    os.mkfifo(os.path.join(os.fsencode(root), b"pkg", "\x9bfifo.py".encode()))
    res = run_cli(["check", ".", "-v"], root, env=STRICT_ENV)
    assert_no_crash(res, (1,))
    no_terminal_controls(res.out + res.err, "notes")
    assert b"\xfe" not in res.err and b"\xff" not in res.err and b"\xff" not in res.out, res
    js = run_cli(["check", ".", "--output-format", "json"], root, env=STRICT_ENV)
    assert_good_findings(js, root, {("pkg/spec.py", "SG101", 8), ("pkg/merge.py", "SG201", 10)})


def test_bidi_override_and_unicode_names_on_ascii_terminal(work):
    """CLASS 8: a speculator file named `é✓\\u202egnp.py` (a right-to-left override, as in Trojan Source), checked under PYTHONIOENCODING=ascii and under UTF-8. EXPECT: no traceback (no UnicodeEncodeError) in any format; ASCII-only stdout under ascii; under UTF-8 the concise output does not hand the terminal a raw U+202E."""
    root = make_project(work / "proj")
    add_file(root, "é✓\u202egnp.py".encode(), SG101_SRC.replace("MyDraftSpeculator", "Uni"))
    for fmt in ("concise", "json", "sarif", "github"):
        res = run_cli(
            ["check", ".", "--output-format", fmt, "--statistics"]
            if fmt == "json"
            else ["check", ".", "--output-format", fmt],
            root,
            env=ASCII_ENV,
        )
        assert_no_crash(res, (1,))
        assert all(b < 0x80 for b in res.out + res.err), f"{fmt}: non-ASCII bytes under PYTHONIOENCODING=ascii: {res!r}"
    res = run_cli(["check", "."], root)
    assert_no_crash(res, (1,))
    assert "\u202e".encode() not in res.out, f"raw RIGHT-TO-LEFT OVERRIDE in the concise output: {res!r}"
