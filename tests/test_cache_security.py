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
import shutil
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


def _specguard(root: Path, xdg: Path, *args: str) -> subprocess.CompletedProcess:
    """`specguard check fork ARGS` in `root`, with `xdg` as the user's cache home."""
    return subprocess.run(
        [sys.executable, "-m", "specguard", "check", "fork", *args],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_CACHE_HOME": str(xdg)},
        timeout=300,
    )


def _check(root: Path, xdg: Path, *extra: str) -> subprocess.CompletedProcess:
    return _specguard(root, xdg, "--cache-dir", "cache", "--format", "json", *extra)


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


# ---- where the cache goes: the analyzed repository does not choose a place outside itself (issue 16 item 10) ----


def _files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


@pytest.mark.parametrize("where", ["absolute", "dotdot", "through-a-symlink", "the-root-itself"])
def test_a_cache_dir_from_the_repository_config_stays_inside_the_repository(tmp_path: Path, where: str) -> None:
    (tmp_path / "repo").mkdir()
    root = tree(tmp_path / "repo", "DraftModelSpeculator")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (root / "docs").symlink_to(outside)
    cache_dir = {
        "absolute": str(outside / "cache"),
        "dotdot": "../elsewhere/cache",
        "through-a-symlink": "docs/cache",
        "the-root-itself": ".",
    }[where]
    (root / "pyproject.toml").write_text(f'[tool.specguard]\ncache-dir = "{cache_dir}"\n')
    before = _files_under(root)
    got = _specguard(root, tmp_path / "xdg")
    assert got.returncode == 2 and got.stdout == ""
    (line,) = got.stderr.splitlines()
    assert line.startswith(f"specguard: error: [tool.specguard] cache-dir '{cache_dir}' ")
    assert "must lie inside the project" in line and "--cache-dir" in line
    assert _files_under(outside) == [] and _files_under(root) == before
    shown = _specguard(root, tmp_path / "xdg", "--show-files")  # writes nothing, so it runs
    assert (shown.returncode, shown.stdout.split()) == (0, sorted(str(p.resolve()) for p in root.rglob("*.py")))
    assert _files_under(outside) == [] and _files_under(root) == before
    # the user, not the repository, may choose any place: on the command line
    chosen = _check(root, tmp_path / "xdg", "--cache-dir", str(outside / "mine"))
    assert chosen.returncode == 1 and (outside / "mine" / ".gitignore").read_text() == "*\n"
    assert _check(root, tmp_path / "xdg", "--no-cache").returncode == 1


def test_a_cache_dir_inside_the_repository_is_used(tmp_path: Path) -> None:
    root = tree(tmp_path, "DraftModelSpeculator")
    (root / "pyproject.toml").write_text('[tool.specguard]\ncache-dir = "build/sg-cache"\n')
    got = _specguard(root, tmp_path / "xdg")
    assert (got.returncode, got.stderr) == (1, "")
    assert (root / "build" / "sg-cache" / ".gitignore").read_text() == "*\n"
    assert list((root / "build" / "sg-cache").rglob("results.msgpack"))


def test_a_symlinked_cache_folder_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    root = tree(tmp_path / "repo", "DraftModelSpeculator")
    outside = tmp_path / "victim-repo"
    outside.mkdir()
    (root / "cache").symlink_to(outside)  # committed to the repository: `--cache-dir cache` would follow it
    (root / ".specguard_cache").symlink_to(outside)  # the default place
    expected = _check(root, tmp_path / "xdg", "--no-cache")
    for args in (["--cache-dir", "cache"], []):
        got = _specguard(root, tmp_path / "xdg", "--format", "json", *args)
        assert (got.returncode, got.stdout) == (1, expected.stdout)
        folder = "cache" if args else root / ".specguard_cache"  # as given, or where the project's root put it
        assert got.stderr.splitlines() == [
            f"specguard: note: the cache folder {folder} is a symlink; specguard does not follow it: no cache"
        ]
    assert _files_under(outside) == []


def test_the_gitignore_is_written_only_into_a_cache_folder_specguard_made(tmp_path: Path) -> None:
    """A repository ships `.specguard_cache/` with `.gitignore` as a link to the project's own (absent) one: writing
    `*` through it would hide every new file of the project from `git status`."""
    root = tree(tmp_path, "DraftModelSpeculator")
    (root / ".specguard_cache").mkdir()
    (root / ".specguard_cache" / ".gitignore").symlink_to("../.gitignore")
    (root / "other").mkdir()
    (root / "other" / ".gitignore").write_text("keep me\n")
    for cache in (".specguard_cache", "other"):
        got = _check(root, tmp_path / "xdg", "--cache-dir", cache)
        assert (got.returncode, got.stderr) == (1, "")
        assert list((root / cache).rglob("results.msgpack"))  # the folder is used as a cache all the same
    assert not (root / ".gitignore").exists() and (root / "other" / ".gitignore").read_text() == "keep me\n"
    made = _check(root, tmp_path / "xdg", "--cache-dir", "fresh/cache")
    assert made.returncode == 1 and (root / "fresh" / "cache" / ".gitignore").read_text() == "*\n"


# ---- the per-user cache key: used only when nobody else could have read or written it (issue 16 item 11) ----


def _key_path(xdg: Path) -> Path:
    return xdg / "specguard" / "cache-key"


def _forge_results(root: Path, xdg: Path) -> None:
    """What an attacker who knows the key commits: the cache of the victim's tree, every result emptied."""
    from specguard.analysis.cache import ResultTable, folder_name
    from specguard.packs import load_pack
    from specguard.settings import load_settings

    key = _datafile.decode(_key_path(xdg).read_bytes(), "cache-key", bytes)
    name = folder_name(key, load_pack().fingerprint, load_settings(None, root).fingerprint())
    results = root / "cache" / name / "results.msgpack"
    table = _datafile.decode(results.read_bytes(), "results", ResultTable)
    assert table and any(table.values()), "the forged file is the one the victim's runs read"
    results.write_bytes(_datafile.encode("results", {k: [] for k in table}))


@pytest.mark.parametrize("how", ["readable-by-others", "group-writable", "another-owner", "symlink", "fifo"])
def test_a_cache_key_others_could_know_is_replaced_and_said_once(tmp_path: Path, how: str) -> None:
    root, xdg = _project(tmp_path), tmp_path / "xdg"
    expected = _check(root, xdg, "--no-cache")
    assert expected.returncode == 1 and '"SG101"' in expected.stdout
    assert _check(root, xdg).stdout == expected.stdout  # makes the key and fills the cache
    key = _key_path(xdg)
    _forge_results(root, xdg)  # with the key as it is, the victim's next run would report nothing
    if how == "readable-by-others":
        key.chmod(0o644)
        why = "its mode is 0644, not 0600"
    elif how == "group-writable":
        key.chmod(0o620)
        why = "its mode is 0620, not 0600"
    elif how == "another-owner":
        if os.geteuid() == 0:
            os.chown(key, 65534, 65534)
            why = "it belongs to user id 65534, not to you"
        else:  # only root can give a file away; for anyone else this case is the mode's
            key.chmod(0o644)
            why = "its mode is 0644, not 0600"
    elif how == "symlink":
        copy = tmp_path / "copied-key"
        copy.write_bytes(key.read_bytes())
        copy.chmod(0o600)
        key.unlink()
        key.symlink_to(copy)
        why = "it is a symlink"
    else:
        key.unlink()
        os.mkfifo(key, 0o600)
        why = "not a regular file (a FIFO); specguard reads regular files only"
    first = _check(root, xdg)
    assert (first.returncode, first.stdout) == (1, expected.stdout), "the forged cache hid the finding"
    assert first.stderr == (
        f"specguard: note: the cache key {key} was not used ({why}): someone else could know it and forge cache "
        "entries; a new key was made, so caches written under the old one are not read\n"
    )
    st = os.stat(key, follow_symlinks=False)
    assert st.st_mode & 0o777 == 0o600 and st.st_uid == os.geteuid() and not key.is_symlink()
    second = _check(root, xdg)  # said once: the new key is the user's own
    assert (second.returncode, second.stdout, second.stderr) == (1, expected.stdout, "")


# ---- specguard clean: removes only what specguard wrote, through no link, and not where a repository points ----


def _clean(root: Path, xdg: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specguard", "clean"],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_CACHE_HOME": str(xdg)},
        timeout=300,
    )


def test_clean_follows_no_link_inside_a_cache_and_leaves_a_cache_dir_outside_the_project(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    root, xdg = tree(tmp_path / "repo", "DraftModelSpeculator"), tmp_path / "xdg"
    (root / "pyproject.toml").write_text("[project]\nname = 'repo'\n")  # the project's root, whatever lies above
    assert _specguard(root, xdg).returncode == 1  # a real cache, in .specguard_cache
    (version,) = [p for p in (root / ".specguard_cache").iterdir() if p.name != ".gitignore"]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "scans.msgpack").write_bytes(b"the victim's file")
    (outside / ".gitignore").write_bytes(b"*\n")
    # a planted version folder that is a link, and one holding a link named as a cache file
    linked = f"v9.9.9-{'be' * 16}"  # named as a version folder of another specguard version
    (root / ".specguard_cache" / linked).symlink_to(outside)
    planted = root / "sub" / ".specguard_cache" / version.name
    planted.mkdir(parents=True)
    (planted / "scans.msgpack").symlink_to(outside / "scans.msgpack")
    (root / "sub" / ".specguard_cache" / ".gitignore").symlink_to(outside / ".gitignore")
    # the repository's configuration names a folder outside it that looks like a cache specguard wrote
    shutil.copytree(root / ".specguard_cache", outside / "cache", symlinks=True)
    (root / "pyproject.toml").write_text('[tool.specguard]\ncache-dir = "../elsewhere/cache"\n')

    got = _clean(root, xdg)
    assert got.returncode == 0
    assert sorted(got.stderr.splitlines()) == sorted(
        [
            f"specguard: warning: {root / '../elsewhere/cache'}: the configured cache-dir lies outside the project "
            f"(at {outside / 'cache'}); left alone",
            f"specguard: warning: .specguard_cache/{linked}: not written by specguard; left alone",
            "specguard: warning: sub/.specguard_cache/.gitignore: not written by specguard; left alone",
            f"specguard: warning: sub/.specguard_cache/{version.name}: not written by specguard; left alone",
        ]
    )
    assert not version.exists() and not (root / ".specguard_cache" / ".gitignore").exists()  # ours: removed
    assert (outside / "scans.msgpack").read_bytes() == b"the victim's file"
    assert (outside / ".gitignore").read_bytes() == b"*\n"
    assert (outside / "cache" / version.name / "results.msgpack").is_file()
    assert (planted / "scans.msgpack").is_symlink()


# ---- a cache another user could have written is not trusted (issue 26 item 2) --------------------------------
#
# A shared checkout: the victim's keyed cache folder is visible in a listing, and another local user (here: user
# id 65534, or a group or world write bit, set by root as that user could have) plants forged results there, or a
# forged settings snapshot in a per-user cache others can write. A cache is used only when every folder and file
# from the cache folder down belongs to the user running the check and is writable by nobody else; otherwise the
# run says so once and runs cold, with the findings a run without a cache reports, and writes nothing there.

OTHER = 65534  # nobody


def _give_away(path: Path) -> None:
    """What another local user's planted file or folder looks like: theirs (root can give it away)."""
    os.chown(path, OTHER, OTHER, follow_symlinks=False)


def _share_with_a_group(path: Path, mode: int) -> None:
    """A folder or file the victim shares with a group others are in (nogroup here), writable by it."""
    os.chown(path, os.geteuid(), OTHER, follow_symlinks=False)
    path.chmod(mode)


def _victim_folder(root: Path, xdg: Path) -> Path:
    (folder,) = [p for p in (root / "cache").iterdir() if p.is_dir()]
    assert _datafile.decode((folder / "results.msgpack").read_bytes(), "results", dict), "a real cache"
    return folder


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else b"", p.stat().st_mtime_ns, p.stat().st_mode)
        for p in sorted(folder.rglob("*"))
    }


_REPOSITORY_ATTACKS = {
    # what the other user did: (how, which object the note names, why it is not trusted)
    "their-own-folder-under-the-victims-name": ("version", "it belongs to user id 65534, not to you"),
    "a-results-file-of-theirs": ("results", "it belongs to user id 65534, not to you"),
    "results-writable-by-others": ("results", "anyone may write it (mode 0666)"),
    "results-writable-by-the-group": ("results", "its group (id 65534) may write it (mode 0620)"),
    "the-victims-folder-writable-by-the-group": ("version", "its group (id 65534) may write it (mode 0775)"),
    "the-victims-folder-writable-by-others": ("version", "anyone may write it (mode 0777)"),
    "their-cache-folder": ("cache", "it belongs to user id 65534, not to you"),
    "a-cache-folder-writable-by-the-group": ("cache", "its group (id 65534) may write it (mode 0775)"),
}


@pytest.mark.parametrize("attack", list(_REPOSITORY_ATTACKS))
def test_a_repository_cache_another_user_could_write_is_not_trusted(tmp_path: Path, attack: str) -> None:
    root, xdg = _project(tmp_path), tmp_path / "xdg"
    expected = _check(root, xdg, "--no-cache")
    assert expected.returncode == 1 and '"SG101"' in expected.stdout
    assert _check(root, xdg).stdout == expected.stdout  # the victim's own cache
    folder = _victim_folder(root, xdg)
    results = folder / "results.msgpack"
    forged = _datafile.encode("results", dict.fromkeys(_datafile.decode(results.read_bytes(), "results", dict), []))
    if attack == "their-own-folder-under-the-victims-name":
        folder.rename(folder.with_name("aside"))
        shutil.copytree(folder.with_name("aside"), folder)
        (folder / "results.msgpack").write_bytes(forged)
        for path in [folder, *folder.iterdir()]:
            _give_away(path)
    elif attack == "a-results-file-of-theirs":
        results.write_bytes(forged)
        _give_away(results)
    elif attack.startswith("results-writable"):
        results.write_bytes(forged)
        _share_with_a_group(results, 0o666 if "others" in attack else 0o620)
    elif attack.startswith("the-victims-folder"):
        _share_with_a_group(folder, 0o775 if "group" in attack else 0o777)
        results.write_bytes(forged)
    else:
        results.write_bytes(forged)
        if attack == "their-cache-folder":
            _give_away(root / "cache")
        else:
            _share_with_a_group(root / "cache", 0o775)
    how, why = _REPOSITORY_ATTACKS[attack]
    named = {"version": folder, "results": results, "cache": root / "cache"}[how]
    shown = os.path.relpath(named, root)
    before = _snapshot(root / "cache")
    for _ in range(2):  # said on every run (once each), and nothing is written there
        got = _check(root, xdg)
        assert (got.returncode, got.stdout) == (1, expected.stdout), "the forged cache hid the finding"
        assert got.stderr == (
            f"specguard: note: the cache folder cache was not used: {shown}: {why}; another user could have "
            "forged what it holds (remove it, or pass --cache-dir): running without a cache\n"
        )
        assert _snapshot(root / "cache") == before


def _validated(xdg: Path, kind: str) -> Path:
    (path,) = (xdg / "specguard" / "validated").glob(f"{kind}-*.msgpack")
    return path


_USER_ATTACKS = {
    "their-user-cache-folder": ("specguard", "it belongs to user id 65534, not to you"),
    "a-user-cache-folder-writable-by-the-group": ("specguard", "its group (id 65534) may write it (mode 0775)"),
    "their-validated-folder": ("specguard/validated", "it belongs to user id 65534, not to you"),
    "a-settings-snapshot-of-theirs": ("settings", "it belongs to user id 65534, not to you"),
    "a-settings-snapshot-writable-by-others": ("settings", "anyone may write it (mode 0606)"),
}


@pytest.mark.parametrize("attack", list(_USER_ATTACKS))
def test_a_per_user_cache_another_user_could_write_is_not_trusted(tmp_path: Path, attack: str) -> None:
    """XDG_CACHE_HOME on a shared disk: another user swaps the victim's validated settings for a snapshot of
    settings that ignore SG101 (made from the same project with that one line added)."""
    root, xdg = _project(tmp_path), tmp_path / "xdg"
    expected = _check(root, xdg, "--no-cache")
    assert expected.returncode == 1 and '"SG101"' in expected.stdout
    assert _check(root, xdg).stdout == expected.stdout  # the victim's key and repository cache, made
    victim = _validated(xdg, "settings")
    pyproject = root / "pyproject.toml"
    original = pyproject.read_text()
    pyproject.write_text('[tool.specguard]\nignore = ["SG104", "SG101"]\n')
    assert _check(root, xdg, "--no-cache").returncode == 0
    (forged,) = [p for p in victim.parent.glob("settings-*.msgpack") if p != victim]
    pyproject.write_text(original)
    victim.write_bytes(forged.read_bytes())
    forged.unlink()
    user = xdg / "specguard"
    if attack == "their-user-cache-folder":
        _give_away(user)
    elif attack == "a-user-cache-folder-writable-by-the-group":
        _share_with_a_group(user, 0o775)
    elif attack == "their-validated-folder":
        _give_away(user / "validated")
    elif attack == "a-settings-snapshot-of-theirs":
        _give_away(victim)
    else:
        _share_with_a_group(victim, 0o606)
    how, why = _USER_ATTACKS[attack]
    named = victim if how == "settings" else xdg / how
    before = _snapshot(user)
    for _ in range(2):
        got = _check(root, xdg)
        assert (got.returncode, got.stdout) == (1, expected.stdout), "the forged settings hid the finding"
        assert got.stderr == (
            f"specguard: note: the user cache {user} was not used: {named}: {why}; another user could have forged "
            "what it holds (make it yours and writable by you alone, or remove it): running without it\n"
        )
        assert _snapshot(user) == before


def test_a_cache_writable_only_by_the_users_own_group_is_still_used(tmp_path: Path) -> None:
    """Distributions give each user a group of their own and a umask of 002, so caches made before are
    group-writable: by that group, which no one else is in, they stay trusted (and warm)."""
    import grp
    import pwd

    user = pwd.getpwuid(os.geteuid())
    group = grp.getgrgid(user.pw_gid)
    assert group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}, "a private group to test with"
    root, xdg = _project(tmp_path), tmp_path / "xdg"
    expected = _check(root, xdg, "--no-cache")
    assert _check(root, xdg).stdout == expected.stdout
    folder = _victim_folder(root, xdg)
    for path in (root / "cache", folder, xdg / "specguard", xdg / "specguard" / "validated"):
        path.chmod(0o775)
    _forge_results(root, xdg)  # an entry only the victim (or their own group) could have written: it is read,
    got = _check(root, xdg)  # which shows the cache is used
    assert (got.returncode, got.stdout, got.stderr) == (0, "[]\n", "")
