"""Data files that are not what they claim (issue 16 items 12 and 14): rule packs, settings, baselines and caches
that are FIFOs, links to /dev/zero, huge, or hostile JSON/TOML.

A pack, a configuration or a baseline ends the run with one line and exit 2; a cache file is ignored (a cold run
that reports what a run without a cache reports). Every run here is a child process under an address-space limit
(RLIMIT_AS), so filling memory fails the test instead of the machine, and under a timeout that only a hang
reaches; nothing is timed.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_cache import tree

MEMORY = 512 << 20  # a run over this tree needs about 60 MB of address space; /dev/zero read whole needs it all


def bounded_check(root: Path, *args: str, xdg: Path | None = None) -> subprocess.CompletedProcess:
    """`specguard check ARGS` in a child that may map at most MEMORY bytes."""
    code = (
        "import resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({MEMORY}, {MEMORY}))\n"
        "from specguard.cli import main\n"
        f"raise SystemExit(main(['check', *{list(args)!r}]))\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(xdg or root / "xdg")}
    return subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, env=env, timeout=120)


def _plant(path: Path, what: str) -> None:
    if what == "fifo":
        os.mkfifo(path)  # nobody writes to it: a blocking open waits forever
    elif what == "dev-zero":
        path.symlink_to("/dev/zero")  # endless zeros: a plain read fills memory
    elif what == "huge":
        with open(path, "wb") as fh:
            fh.truncate(17 << 20)  # sparse, over the 16 MiB cap of data files
    else:
        raise AssertionError(what)


HOSTILE = ["fifo", "dev-zero", "huge"]


@pytest.mark.parametrize("what", HOSTILE)
def test_a_hostile_rule_pack_is_one_line_and_exit_2(tmp_path: Path, what: str) -> None:
    root = tree(tmp_path, "DraftModelSpeculator")
    _plant(root / "pack.toml", what)
    out = bounded_check(root, "fork", "--no-cache", "--rule-pack", "pack.toml")
    assert out.returncode == 2 and out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line.startswith("specguard: error: pack.toml: cannot read rule pack: ")
    assert ("not a regular file" in line) if what != "huge" else ("file too large" in line)


@pytest.mark.parametrize("what", HOSTILE)
def test_a_hostile_baseline_is_one_line_and_exit_2(tmp_path: Path, what: str) -> None:
    root = tree(tmp_path, "DraftModelSpeculator")
    _plant(root / "baseline.json", what)
    out = bounded_check(root, "fork", "--no-cache", "--baseline", "baseline.json")
    assert out.returncode == 2 and out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line.startswith("specguard: error: baseline.json: unreadable baseline: ")


def test_a_huge_pyproject_is_one_line_and_exit_2(tmp_path: Path) -> None:
    root = tree(tmp_path, "DraftModelSpeculator")
    _plant(root / "pyproject.toml", "huge")
    out = bounded_check(root, "fork", "--no-cache")
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"specguard: error: {root / 'pyproject.toml'}: cannot read configuration: file too large "
        f"({17 << 20} bytes; the limit is {16 << 20})"
    ]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"version": 1, "findings": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ("[" * 100_000, "nested too deeply"),
        ('"just a string"', "not a specguard baseline"),
        ('{"version": 1, "findings": {"a": 1}}', "not a specguard baseline"),
        ("\xff", "not UTF-8 text"),
    ],
    ids=["deep-findings", "deep-unclosed", "string", "findings-not-a-list", "not-utf8"],
)
def test_hostile_baseline_json_says_unreadable_baseline(tmp_path: Path, text: str, why: str) -> None:
    root = tree(tmp_path, "DraftModelSpeculator")
    (root / "baseline.json").write_bytes(text.encode("utf-8", "surrogateescape") if text != "\xff" else b"\xff")
    out = bounded_check(root, "fork", "--no-cache", "--baseline", "baseline.json")
    assert out.returncode == 2 and out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line.startswith("specguard: error: baseline.json: unreadable baseline: ") and why in line, line


def test_deeply_nested_toml_in_a_pack_is_one_line(tmp_path: Path) -> None:
    root = tree(tmp_path, "DraftModelSpeculator")
    (root / "pack.toml").write_text("[metadata]\nsink = " + "[" * 50_000 + "]" * 50_000 + "\n")
    out = bounded_check(root, "fork", "--no-cache", "--rule-pack", "pack.toml")
    assert out.returncode == 2
    assert out.stderr.splitlines() == ["specguard: error: pack.toml: rule pack is not valid TOML: nested too deeply"]


def test_write_baseline_keeps_the_previous_baseline_whole_when_the_write_fails(tmp_path: Path) -> None:
    """A tiny RLIMIT_FSIZE stands for a full disk: before, the baseline was truncated and the old one lost."""
    root = tree(tmp_path, "DraftModelSpeculator")
    previous = json.dumps({"version": 1, "findings": []}) + "\n"
    (root / "baseline.json").write_text(previous)
    (root / "baseline.json").chmod(0o640)
    code = (
        "import resource\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (40, 40))\n"
        "from specguard.cli import main\n"
        "raise SystemExit(main(['check', 'fork', '--no-cache', '--write-baseline', 'baseline.json']))\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2
    assert out.stderr.splitlines() == ["specguard: error: baseline.json: cannot write baseline: File too large"]
    assert (root / "baseline.json").read_text() == previous
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == []  # no temp file left
    written = bounded_check(root, "fork", "--no-cache", "--write-baseline", "baseline.json")
    assert written.returncode == 0 and json.loads((root / "baseline.json").read_text())["findings"]
    assert stat.S_IMODE((root / "baseline.json").stat().st_mode) == 0o640  # the mode it had


def test_a_baseline_written_through_a_symlink_keeps_the_link(tmp_path: Path) -> None:
    root = tree(tmp_path, "DraftModelSpeculator")
    (root / "ci").mkdir()
    (root / "ci" / "baseline.json").write_text("{}")
    (root / "baseline.json").symlink_to("ci/baseline.json")
    assert bounded_check(root, "fork", "--no-cache", "--write-baseline", "baseline.json").returncode == 0
    assert (root / "baseline.json").is_symlink()
    assert json.loads((root / "ci" / "baseline.json").read_text())["version"] == 1


@pytest.mark.parametrize("what", HOSTILE)
def test_hostile_repository_cache_files_mean_a_cold_run(tmp_path: Path, what: str) -> None:
    root = tree(tmp_path, "DraftModelSpeculator")
    clean = bounded_check(root, "fork", "--no-cache", "--format", "json")
    first = bounded_check(root, "fork", "--cache-dir", "cache", "--format", "json")
    assert first.stdout == clean.stdout
    stored = sorted((root / "cache").rglob("*.msgpack"))
    assert [p.name for p in stored] == ["judged.msgpack", "results.msgpack", "scans.msgpack"]
    for path in stored:
        path.unlink()
        _plant(path, what)
    again = bounded_check(root, "fork", "--cache-dir", "cache", "--format", "json")
    assert (again.returncode, again.stdout, again.stderr) == (clean.returncode, clean.stdout, "")


@pytest.mark.parametrize("what", HOSTILE)
def test_hostile_user_cache_files_mean_validating_again(tmp_path: Path, what: str) -> None:
    root = tree(tmp_path, "DraftModelSpeculator")
    (root / "pyproject.toml").write_text('[tool.specguard]\nignore = ["SG104"]\n')
    xdg = tmp_path / "xdg"
    clean = bounded_check(root, "fork", "--no-cache", "--format", "json", xdg=xdg)
    validated = sorted((xdg / "specguard" / "validated").glob("*.msgpack"))
    assert {p.name.split("-")[0] for p in validated} == {"pack", "settings"}
    for path in validated:
        path.unlink()
        _plant(path, what)
    again = bounded_check(root, "fork", "--no-cache", "--format", "json", xdg=xdg)
    assert (again.returncode, again.stdout, again.stderr) == (clean.returncode, clean.stdout, "")
