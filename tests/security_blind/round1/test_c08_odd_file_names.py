"""CLASS 8: file names that are not UTF-8 or hold characters that break output formats (newline, tab, quote,
`%`, `#`, `?`, space, comma/colon, leading dash, backslash), each file holding a real SG101. Every output
format must report every finding in valid output for that format, exit 1, no traceback; also with -o FILE."""

import json
import os
import re
import urllib.parse
from pathlib import Path

from sg1harness import (
    FINDING_RE,
    SG101_BAD,
    SG201_BAD,
    assert_sane,
    run_cli,
)

NAMES = [
    b"\xff\xfe.py",
    b"caf\xe9.py",
    b"new\nline.py",
    b"tab\tname.py",
    b'quo"te.py',
    b"pct%41.py",
    b"hash#frag.py",
    b"q?uery.py",
    b"sp ace.py",
    b"comma,colon:.py",
    b"-leading-dash.py",
    b"--fix.py",
    b"back\\slash.py",
    "ünïcødé-名前.py".encode(),
]
NONUTF8_DIR = b"d\xffir"


def _tree(tmp_path: Path) -> tuple[Path, list[bytes]]:
    proj = tmp_path / "proj"
    (proj / ".git").mkdir(parents=True)
    (proj / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    pkg = os.fsencode(str(proj / "pkg"))
    os.makedirs(pkg)
    rels = []
    for i, name in enumerate(NAMES):
        with open(os.path.join(pkg, name), "wb") as fh:
            fh.write(SG101_BAD.replace("MyDraftSpeculator", f"Odd{i}Speculator").encode())
        rels.append(b"pkg/" + name)
    os.makedirs(os.path.join(pkg, NONUTF8_DIR))
    with open(os.path.join(pkg, NONUTF8_DIR, b"mod.py"), "wb") as fh:
        fh.write(SG101_BAD.replace("MyDraftSpeculator", "OddDirSpeculator").encode())
    rels.append(b"pkg/" + NONUTF8_DIR + b"/mod.py")
    return proj, rels


def _utf8_ok(rel: bytes) -> bool:
    try:
        rel.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _text(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AssertionError(f"{what} is not valid UTF-8 ({exc})") from None


def _check_concise(data: bytes, rels, res):
    text = _text(data, "concise output")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    finds = [m for m in (FINDING_RE.match(ln) for ln in lines) if m and m.group("code") == "SG101"]
    other = [
        ln for ln in lines if not FINDING_RE.match(ln) and not ln.startswith(("Found ", "[*]", "All checks", "No "))
    ]
    assert not other, (
        f"lines that are neither findings nor the summary (a name broke a line?): {other[:5]!r}\n{res.describe()}"
    )
    assert len(finds) == len(rels), f"{len(finds)} SG101 lines for {len(rels)} files\n{res.describe()}"
    assert len({m.group("path") for m in finds}) == len(rels), f"paths not distinct\n{res.describe()}"


def _check_json(data: bytes, rels, res):
    items = json.loads(_text(data, "JSON output"))
    sg = [f for f in items if f["code"] == "SG101"]
    assert len(sg) == len(rels), f"{len(sg)} SG101 findings for {len(rels)} files\n{res.describe()}"
    names = [f["filename"] for f in sg]
    assert len(set(names)) == len(rels), f"filenames not distinct: {names}\n{res.describe()}"
    for rel in rels:
        if _utf8_ok(rel):
            r = rel.decode()
            assert any(n.endswith("/" + r) for n in names), f"{r!r} not named in the JSON output: {names}"


URI_OK = re.compile(r"^[A-Za-z0-9\-._~:/@!$&'()*+,;=%]*$")


def _check_sarif(data: bytes, rels, res):
    doc = json.loads(_text(data, "SARIF output"))
    results = [r for run in doc["runs"] for r in run.get("results", [])]
    sg = [r for r in results if r.get("ruleId") == "SG101"]
    assert len(sg) == len(rels), f"{len(sg)} SG101 results for {len(rels)} files\n{res.describe()}"
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in sg]
    assert len(set(uris)) == len(rels), f"uris not distinct: {uris}"
    for u in uris:
        assert URI_OK.match(u), (
            f"SARIF uri {u!r} is not a valid URI reference path (raw space, #, ?, non-ASCII, control)"
        )
        assert not re.search(r"%(?![0-9A-Fa-f]{2})", u), f"SARIF uri {u!r} has a bare %"
    decoded = [urllib.parse.unquote_to_bytes(u) for u in uris]
    for rel in rels:
        if _utf8_ok(rel):
            assert any(d.endswith(rel) for d in decoded), f"no uri decodes to {rel!r}: {uris}"


GH = re.compile(r"^::(error|warning|notice) (?P<props>[^:]*)::(?P<msg>.*)$")


def _gh_unescape(v: str) -> str:
    return v.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


def _check_github(data: bytes, rels, res):
    text = _text(data, "GitHub output")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    bad = [ln for ln in lines if not GH.match(ln)]
    assert not bad, f"lines that are not workflow commands (a name broke one?): {bad[:5]!r}\n{res.describe()}"
    files = []
    for ln in lines:
        props = dict(p.split("=", 1) for p in GH.match(ln).group("props").split(",") if "=" in p)
        if "SG101" in ln:
            files.append(_gh_unescape(props.get("file", "")))
    assert len(files) == len(rels), f"{len(files)} SG101 annotations for {len(rels)} files\n{res.describe()}"
    assert len(set(files)) == len(rels), f"file properties not distinct: {files}"
    for rel in rels:
        if _utf8_ok(rel):
            assert any(f.endswith(rel.decode()) for f in files), f"{rel!r} not in any file= property: {files}"


CHECKERS = {"concise": _check_concise, "json": _check_json, "sarif": _check_sarif, "github": _check_github}


def _stdout_case(tmp_path, home, fmt):
    proj, rels = _tree(tmp_path)
    res = run_cli(["check", "pkg", "-n", "--output-format", fmt], proj, home)
    assert_sane(res, rcs=(1,))
    CHECKERS[fmt](res.out_b, rels, res)


def _file_case(tmp_path, home, fmt):
    proj, rels = _tree(tmp_path)
    out = tmp_path / f"report.{fmt}"
    res = run_cli(["check", "pkg", "-n", "--output-format", fmt, "-o", str(out)], proj, home)
    assert_sane(res, rcs=(1,))
    assert out.exists(), f"-o {out} was not written\n{res.describe()}"
    CHECKERS[fmt](out.read_bytes(), rels, res)


def test_concise_stdout(tmp_path, home):
    """CLASS 8: 15 files with odd names (\\xff\\xfe, Latin-1 é, newline, tab, quote, %, #, ?, space, comma/colon, leading dashes, backslash, non-ASCII, a non-UTF-8 folder), each with SG101; --output-format concise. EXPECT: exit 1, no traceback, UTF-8 output whose every line is a finding or the summary, 15 distinct SG101 lines."""
    _stdout_case(tmp_path, home, "concise")


def test_json_stdout(tmp_path, home):
    """CLASS 8: the same 15 odd-named files; --output-format json. EXPECT: exit 1, no traceback, output parses as JSON (valid UTF-8), 15 distinct SG101 findings, each UTF-8 name present in a filename."""
    _stdout_case(tmp_path, home, "json")


def test_sarif_stdout(tmp_path, home):
    """CLASS 8: the same 15 odd-named files; --output-format sarif. EXPECT: exit 1, no traceback, SARIF parses, 15 SG101 results whose artifact uris are distinct valid URI references (percent-encoded: no raw space, #, ?, non-ASCII) that decode back to the file's path."""
    _stdout_case(tmp_path, home, "sarif")


def test_github_stdout(tmp_path, home):
    """CLASS 8: the same 15 odd-named files; --output-format github. EXPECT: exit 1, no traceback, every line is a `::error ...::` workflow command (newline/comma/colon/% escaped in file=), 15 distinct SG101 annotations."""
    _stdout_case(tmp_path, home, "github")


def test_concise_output_file(tmp_path, home):
    """CLASS 8: the same 15 odd-named files; --output-format concise -o FILE. EXPECT: exit 1, no traceback, FILE written and valid as for stdout."""
    _file_case(tmp_path, home, "concise")


def test_json_output_file(tmp_path, home):
    """CLASS 8: the same 15 odd-named files; --output-format json -o FILE. EXPECT: exit 1, no traceback, FILE parses as JSON with 15 distinct SG101 findings."""
    _file_case(tmp_path, home, "json")


def test_sarif_output_file(tmp_path, home):
    """CLASS 8: the same 15 odd-named files; --output-format sarif -o FILE. EXPECT: exit 1, no traceback, FILE is SARIF with 15 SG101 results and valid, distinct, decodable uris."""
    _file_case(tmp_path, home, "sarif")


def test_github_output_file(tmp_path, home):
    """CLASS 8: the same 15 odd-named files; --output-format github -o FILE. EXPECT: exit 1, no traceback, FILE holds 15 well-formed SG101 workflow commands."""
    _file_case(tmp_path, home, "github")


def test_text_alias_and_statistics(tmp_path, home):
    """CLASS 8: the same 15 odd-named files; --output-format text (the concise alias), then --statistics in concise and json. EXPECT: exit 1 each time, no traceback, the text output valid as concise, the JSON statistics parse and count 15 SG101."""
    proj, rels = _tree(tmp_path)
    res = run_cli(["check", "pkg", "-n", "--output-format", "text"], proj, home)
    assert_sane(res, rcs=(1,))
    _check_concise(res.out_b, rels, res)
    res = run_cli(["check", "pkg", "-n", "--statistics"], proj, home)
    assert_sane(res, rcs=(1,))
    _text(res.out_b, "statistics output")
    res = run_cli(["check", "pkg", "-n", "--statistics", "--output-format", "json"], proj, home)
    assert_sane(res, rcs=(1,))
    stats = json.loads(_text(res.out_b, "JSON statistics"))
    counts = {s["code"]: s["count"] for s in stats}
    assert counts.get("SG101") == len(rels), f"statistics count {counts} for {len(rels)} files\n{res.describe()}"


def test_diff_fix_and_baseline_with_odd_names(tmp_path, home):
    """CLASS 8: odd-named files holding a fixable SG201 (newline, \\xff, %, leading dash in the name): --diff, then --fix, then --write-baseline/--baseline on the SG101 tree. EXPECT: no traceback anywhere; --diff exits 1 with UTF-8 output; --fix exits 0 and fixes every file; the baseline run exits 0 after --write-baseline exits 0."""
    proj = tmp_path / "fixproj"
    (proj / ".git").mkdir(parents=True)
    pkg = os.fsencode(str(proj / "pkg"))
    os.makedirs(pkg)
    names = [b"kv\n1.py", b"kv\xff2.py", b"kv%3.py", b"-kv4.py"]
    for i, n in enumerate(names):
        with open(os.path.join(pkg, n), "wb") as fh:
            fh.write(SG201_BAD.replace("MLAAttentionSpec", f"MLA{i}AttentionSpec").encode())
    res = run_cli(["check", "pkg", "-n", "--diff"], proj, home)
    assert_sane(res, rcs=(1,))
    _text(res.out_b, "--diff output")
    res = run_cli(["check", "pkg", "-n", "--fix"], proj, home)
    assert_sane(res, rcs=(0,))
    for n in names:
        with open(os.path.join(pkg, n), "rb") as fh:
            assert b"non_causal_multi_token_decode_values" in fh.read(), f"{n!r} was not fixed\n{res.describe()}"
    proj2, rels = _tree(tmp_path / "b")
    res = run_cli(["check", "pkg", "-n", "--write-baseline", "base.json"], proj2, home)
    assert_sane(res, rcs=(0,))
    res = run_cli(["check", "pkg", "-n", "--baseline", "base.json"], proj2, home)
    assert_sane(res, rcs=(0,))
