"""The caches are data, never code: hostile, damaged or foreign cache files cost a cold run, nothing else.

The repository cache lives in the analyzed tree, where a pull request can plant files; the per-user cache holds
validated packs and settings. Every file specguard reads back is planted here with a pickle payload that would
create a marker file, random bytes, truncated data, well-formed data of the wrong shape, and data from another
version, and the run must create no marker, exit normally and report what a run without any cache reports.
"""

from __future__ import annotations

import ast
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from specguard import _datafile
from tests.test_cache import tree

REPO = Path(__file__).resolve().parent.parent


class _Payload:
    """Unpickling this runs os.system: what a planted pickle cache would do to a loader that trusts it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def _check(root: Path, xdg: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specguard", "check", "fork", "--cache-dir", "cache", "--format", "json", *extra],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_CACHE_HOME": str(xdg)},
        timeout=300,
    )


def _project(tmp_path: Path) -> Path:
    """The test tree with a [tool.specguard] table, so validated settings are cached too."""
    root = tree(tmp_path, "DraftModelSpeculator")
    (root / "pyproject.toml").write_text('[tool.specguard]\nignore = ["SG104"]\n')
    return root


def _stored_files(root: Path, xdg: Path) -> list[Path]:
    """The repository cache's files and the per-user cache's validated packs and settings."""
    return [*(root / "cache").rglob("*.msgpack"), *(xdg / "specguard").rglob("*.msgpack")]


def _hostile_contents(original: bytes, marker: Path) -> dict[str, bytes]:
    return {
        "pickle": pickle.dumps(_Payload(marker)),
        "random": os.urandom(4096),
        "truncated": original[: len(original) // 2],
        "wrong shape": _datafile.encode("scans", {"fork/leaf.py": {"path": 3, "stamp": "now"}}),
        "wrong kind": _datafile.encode("results", []),
        "other version": original.replace(b"0.1.0", b"9.9.9"),
        "empty": b"",
    }


@pytest.mark.parametrize("kind", list(_hostile_contents(b"", Path())))
def test_planted_cache_files_run_nothing_and_change_no_finding(tmp_path: Path, kind: str) -> None:
    root, xdg, marker = _project(tmp_path), tmp_path / "xdg", tmp_path / "PWNED"
    expected = _check(root, xdg, "--no-cache")
    assert expected.returncode == 1 and '"SG101"' in expected.stdout
    assert _check(root, xdg).stdout == expected.stdout  # fills both caches
    stored = _stored_files(root, xdg)
    assert {p.name for p in stored} >= {"scans.msgpack", "results.msgpack"}
    assert any(p.name.startswith("pack-") for p in stored) and any(p.name.startswith("settings-") for p in stored)
    for path in stored:
        path.write_bytes(_hostile_contents(path.read_bytes(), marker)[kind])
    _rerun_unharmed(root, xdg, expected, marker)


@pytest.mark.parametrize("kind", list(_hostile_contents(b"", Path())))
def test_a_planted_cache_key_runs_nothing_and_changes_no_finding(tmp_path: Path, kind: str) -> None:
    root, xdg, marker = _project(tmp_path), tmp_path / "xdg", tmp_path / "PWNED"
    expected = _check(root, xdg, "--no-cache")
    _check(root, xdg)
    key = xdg / "specguard" / "cache-key"
    key.write_bytes(_hostile_contents(key.read_bytes(), marker)[kind])
    _rerun_unharmed(root, xdg, expected, marker)


def _rerun_unharmed(root: Path, xdg: Path, expected: subprocess.CompletedProcess, marker: Path) -> None:
    for _ in range(2):  # the first run replaces what it could not read; the second reads what the first wrote
        got = _check(root, xdg)
        assert (got.returncode, got.stdout, got.stderr) == (1, expected.stdout, "")
    assert not marker.exists()


def test_a_cache_folder_from_elsewhere_is_never_read(tmp_path: Path) -> None:
    """A cache committed to the repository (or copied from another machine) was written under another user's key:
    even well-formed, it is not found, so it can neither run code nor hide a finding."""
    root, marker = _project(tmp_path), tmp_path / "PWNED"
    _check(root, tmp_path / "attacker")
    for path in (root / "cache").rglob("results.msgpack"):  # the attacker's cache now says: no findings
        path.write_bytes(_datafile.encode("results", {}))
    for path in (root / "cache").rglob("scans.msgpack"):
        path.write_bytes(_datafile.encode("scans", {}))
    (root / "cache" / "v0.1.0-f2-0000000000000000-0000000000000000").mkdir()
    (root / "cache" / "v0.1.0-f2-0000000000000000-0000000000000000" / "scans.pickle").write_bytes(
        pickle.dumps(_Payload(marker))
    )
    got = _check(root, tmp_path / "victim")
    assert got.returncode == 1 and '"SG101"' in got.stdout
    assert not marker.exists()


# What may deserialize or run code: a module that imports one of these, a call of one of these builtins (by name
# or through `builtins`), or a YAML loader that is not the safe one.
_CODE_LOADERS = {"pickle", "marshal", "shelve", "dill", "cloudpickle", "joblib", "_pickle", "copyreg"}
_CODE_BUILTINS = {"eval", "exec", "__import__"}  # compile() runs nothing: exec is what would
_UNSAFE_YAML = {"load", "unsafe_load", "full_load", "load_all", "unsafe_load_all", "full_load_all"}
# The one reviewed exception: runtime/mirror.py compiles a wrapper whose text it generates from the signature of
# an installed FlashInfer function (parameter names only); it reads no file and no cache.
_ALLOWED = {("specguard/runtime/mirror.py", "exec")}


def _uses(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names} & _CODE_LOADERS
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module.split(".")[0]} & _CODE_LOADERS
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in _CODE_BUILTINS:
                found.add(func.id)
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                owner = func.value.id
                if (owner == "builtins" and func.attr in _CODE_BUILTINS) or (
                    owner == "yaml" and func.attr in _UNSAFE_YAML
                ):
                    found.add(func.attr)
    return found


def test_no_code_loader_anywhere_in_the_package() -> None:
    """No pickle/marshal/shelve/eval on any path of specguard/: the worker processes exchange data through
    concurrent.futures (which pickles in memory, never from disk), so nothing of ours needs to import them."""
    offenders = sorted(
        (str(path.relative_to(REPO)), use)
        for path in (REPO / "specguard").rglob("*.py")
        for use in _uses(path)
        if (str(path.relative_to(REPO)), use) not in _ALLOWED
    )
    assert offenders == []


def test_the_scan_finds_what_it_looks_for(tmp_path: Path) -> None:
    """The repository-wide test above is only as good as its scan: each forbidden form is caught."""
    samples = {
        "import pickle\n": "pickle",
        "from marshal import loads\n": "marshal",
        "import shelve as s\n": "shelve",
        "x = eval('1')\n": "eval",
        "import yaml\nyaml.load(open('f'))\n": "load",
        "import yaml\nyaml.unsafe_load('')\n": "unsafe_load",
        "import builtins\nbuiltins.exec('1')\n": "exec",
    }
    not_code = "class E:\n    def eval(self, x):\n        return x\n\nE().eval(1)\nimport yaml\nyaml.safe_load('')\n"
    (tmp_path / "sample.py").write_text(not_code)
    assert _uses(tmp_path / "sample.py") == set()  # a method named eval, the safe YAML loader
    for text, expected in samples.items():
        path = tmp_path / "sample.py"
        path.write_text(text)
        assert expected in _uses(path), text
