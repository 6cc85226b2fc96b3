"""The per-file cache: scans keyed by (size, mtime), rule results keyed by content and the facts they used.

The cache lives in the analyzed tree, so it is treated as hostile input. Its files are data (specguard/_datafile.py:
msgpack decoded into FileScan and Finding with every field type-checked), never code, read as regular files under
a size cap. Its folder is named by a keyed hash of (specguard version, pack, settings) under a random key kept in
the user's cache, used only while it is a regular file of the user's with mode 0600: a cache folder committed to
the repository, or copied from another machine, is never found, so it can neither run code nor hide findings.
A cache folder that is a symlink is not followed, and the `.gitignore` that keeps the cache out of git is written
only into a folder specguard has just created. Writes are atomic (temp file + rename) so a run interrupted
mid-write leaves the previous cache usable.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from specguard import __version__, _datafile
from specguard._files import DATA_CAP, UnreadableFile, read_regular_stat
from specguard._snapshots import user_cache_home
from specguard.analysis.findings import Finding, Judgement
from specguard.analysis.scan import FileScan
from specguard.analysis.source import UNSTAMPED

_FORMAT = 8  # bump when a cached type changes shape
_SCANS, _RESULTS, _JUDGED = "scans.msgpack", "results.msgpack", "judged.msgpack"
DATA_FILES = (_SCANS, _RESULTS, _JUDGED)  # what a cache folder holds (`specguard clean` removes nothing else)
GITIGNORE = b"*\n"  # what the cache root's .gitignore holds, so that no one commits the cache
_VERSION_FOLDER = re.compile(r"v[\w.+!-]+-[0-9a-f]{32}")  # Cache.at's names, of any specguard version


@dataclass(frozen=True)
class JudgedFile:
    """A file's judgements, with what they were computed from: the file and its facts (`key`), and every file the
    evaluation read (`deps`: path, size, mtime_ns)."""

    key: str
    deps: tuple[tuple[str, int, int], ...]
    judgements: tuple[Judgement, ...]


ScanTable = dict[str, FileScan]
ResultTable = dict[str, list[Finding]]
JudgedTable = dict[str, JudgedFile]


def _user_key() -> tuple[bytes | None, str | None]:
    """This user's random cache key, made on first use (None where it can be neither read nor stored), and a note
    when the key file there was not used because someone else could have written it."""
    path = user_cache_home() / "cache-key"
    why = None
    try:
        data, st = read_regular_stat(path, DATA_CAP, follow=False)
    except UnreadableFile as exc:
        if os.path.lexists(path):
            why = "it is a symlink" if os.path.islink(path) else exc.reason
    else:
        if st.st_uid != os.geteuid():
            why = f"it belongs to user id {st.st_uid}, not to you"
        elif stat.S_IMODE(st.st_mode) != 0o600:
            why = f"its mode is {stat.S_IMODE(st.st_mode):04o}, not 0600"
        else:
            key = _datafile.decode(data, "cache-key", bytes)
            if isinstance(key, bytes) and len(key) == 32:
                return key, None  # a damaged key (below) is only a cold run: nothing to say
    note = None
    if why is not None:
        note = (
            f"the cache key {path} was not used ({why}): someone else could know it and forge cache entries; "
            "a new key was made, so caches written under the old one are not read"
        )
    key = secrets.token_bytes(32)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _datafile.write(path, "cache-key", key)  # mode 0600, replacing (never following) what was there
    except OSError as exc:
        if note is not None:
            note = f"the cache key {path} was not used ({why}) and no new one could be written ({exc.strerror})"
            return None, note + "; running without a cache"
        return None, None
    return key, note


def version_folder_name(name: str) -> bool:
    """Whether `name` is a cache folder's name as `Cache.at` makes them, for any version (`specguard clean`)."""
    return _VERSION_FOLDER.fullmatch(name) is not None


class Cache:
    def __init__(self, folder: Path | None, notes: list[str] | None = None) -> None:
        self.folder = folder
        self.notes = notes or []  # what the run says once about the cache it could not use
        self.scans: ScanTable = {}
        self.results: ResultTable = {}
        self.judgements: JudgedTable = {}
        self._dirty = False
        if folder is not None:
            self.scans = _datafile.read(folder / _SCANS, "scans", ScanTable) or {}
            self.results = _datafile.read(folder / _RESULTS, "results", ResultTable) or {}
            self.judgements = _datafile.read(folder / _JUDGED, "judged", JudgedTable) or {}

    @classmethod
    def at(cls, root: Path, pack_fp: str, settings_fp: str) -> Cache:
        """The cache folder for this version, pack and settings under `root`; no cache where the user has no key,
        or where `root` is a symlink (it could lead anywhere: specguard never follows one to write)."""
        if os.path.islink(root):
            return cls(None, [f"the cache folder {root} is a symlink; specguard does not follow it: no cache"])
        key, note = _user_key()
        notes = [note] if note else []
        if key is None:
            return cls(None, notes)
        name = hashlib.blake2b(f"{__version__}/{_FORMAT}/{pack_fp}/{settings_fp}".encode(), key=key, digest_size=16)
        return cls(root / f"v{__version__}-{name.hexdigest()}", notes)

    def put_scan(self, path: str, scan: FileScan) -> None:
        if scan.stamp == UNSTAMPED:
            return  # unreadable, or changed too recently for its stamp to tell versions apart
        self.scans[path] = scan
        self._dirty = True

    def put_result(self, key: str, findings: list[Finding]) -> None:
        self.results[key] = findings
        self._dirty = True

    def put_judged(self, path: str, judged: JudgedFile) -> None:
        self.judgements[path] = judged
        self._dirty = True

    def save(self, live_paths: set[str], live_results: set[str]) -> None:
        if self.folder is None or not self._dirty:
            return
        self.scans = {p: s for p, s in self.scans.items() if p in live_paths}
        self.results = {k: r for k, r in self.results.items() if k in live_results}
        self.judgements = {p: j for p, j in self.judgements.items() if p in live_paths}
        try:
            if _new_folder(self.folder.parent, parents=True):
                _gitignore(self.folder.parent)
            _new_folder(self.folder)
            _datafile.write(self.folder / _SCANS, "scans", self.scans)
            _datafile.write(self.folder / _RESULTS, "results", self.results)
            _datafile.write(self.folder / _JUDGED, "judged", self.judgements)
        except OSError:
            pass  # a read-only tree still gets analyzed, just without a cache


def _new_folder(folder: Path, parents: bool = False) -> bool:
    """Make `folder` unless it exists; whether this call made it. Raises OSError where it exists as anything but a
    real folder (a symlink planted since the run started is not written through)."""
    try:
        folder.mkdir(parents=parents)
        return True
    except FileExistsError:
        if os.path.islink(folder) or not folder.is_dir():
            raise
        return False


def _gitignore(folder: Path) -> None:
    """Keep the cache out of git, inside the folder specguard just made (never a file that is already there)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(folder / ".gitignore", flags, 0o644)
    try:
        os.write(fd, GITIGNORE)
    finally:
        os.close(fd)
