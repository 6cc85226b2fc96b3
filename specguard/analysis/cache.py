"""The per-file cache: scans keyed by (size, mtime), rule results keyed by content and the facts they used.

The cache lives in the analyzed tree, so it is treated as hostile input. Its files are data (specguard/_datafile.py:
msgpack decoded into FileScan and Finding with every field type-checked), never code, read as regular files under
a size cap. Its folder is named by a keyed hash of (specguard version and code, pack, settings) under a random key
kept in the user's cache, used only while it is a regular file of the user's with mode 0600: a cache folder committed to
the repository, or copied from another machine, is never found, so it can neither run code nor hide findings.
A cache folder that is a symlink is not followed, and the `.gitignore` that keeps the cache out of git is written
only into a folder specguard has just created. Every folder and file of the cache is opened beneath a handle held
on the project's root (`_files.open_beneath`), so a folder swapped for a link meanwhile cannot send a read or a
write elsewhere. A shared checkout's cache folder is listed by anyone, so the cache is used only while every folder
and file from the cache folder down belongs to the user running the check and is writable by no one else (checked
on the open folders and files, so the check and the read are of the same objects); otherwise the run says so once,
goes without it and writes nothing there. Writes are atomic (temp file + rename) so a run interrupted mid-write
leaves the previous cache usable.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specguard import __version__, _datafile
from specguard._files import (
    CACHE_CAP,
    DATA_CAP,
    FOLDER,
    OutsideTree,
    UnreadableFile,
    open_beneath,
    open_folder,
    read_regular_stat,
    relative_inside,
)
from specguard._snapshots import user_cache_folder, user_cache_home
from specguard.analysis.scan import FileScan
from specguard.findings import Finding, Judgement
from specguard.ownership import untrusted
from specguard.program.discover import modules_fingerprint
from specguard.program.reading import UNSTAMPED

_FORMAT = 9  # bump when a cached type changes shape
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
    """This user's random cache key, made on first use (None where it can be neither read nor stored, or where the
    per-user cache folder is not the user's alone), and a note when the key file there was not used because someone
    else could have written it."""
    with user_cache_folder(create=True) as folder:
        if folder is None:
            return None, None  # _snapshots says why, once, where someone else could have written there
        return _key_in(folder, user_cache_home() / "cache-key")


def _key_in(folder: int, path: Path) -> tuple[bytes | None, str | None]:
    why = None
    try:
        data, st = read_regular_stat(path.name, DATA_CAP, follow=False, dir_fd=folder)
    except UnreadableFile as exc:
        with contextlib.suppress(OSError):
            planted = os.stat(path.name, dir_fd=folder, follow_symlinks=False)
            why = "it is a symlink" if stat.S_ISLNK(planted.st_mode) else exc.reason
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
        _datafile.write(path.name, "cache-key", key, dir_fd=folder)  # mode 0600, replacing (never following) it
    except OSError as exc:
        if note is not None:
            note = f"the cache key {path} was not used ({why}) and no new one could be written ({exc.strerror})"
            return None, note + "; running without a cache"
        return None, None
    return key, note


@functools.cache
def code_fingerprint() -> str:
    """specguard's own modules as they are installed: a checkout or an editable install changes its code without a
    new version number, and results cached by the old code must not be read by the new (a rule changed, the
    version and the inputs did not)."""
    return modules_fingerprint(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def folder_name(key: bytes, pack_fp: str, settings_fp: str) -> str:
    """The cache folder's name for this version and code of specguard, this pack and these settings, under `key`."""
    keyed = f"{__version__}/{_FORMAT}/{code_fingerprint()}/{pack_fp}/{settings_fp}"
    return f"v{__version__}-{hashlib.blake2b(keyed.encode(), key=key, digest_size=16).hexdigest()}"


def version_folder_name(name: str) -> bool:
    """Whether `name` is a cache folder's name as `Cache.at` makes them, for any version (`specguard clean`)."""
    return _VERSION_FOLDER.fullmatch(name) is not None


class _NoCache(Exception):
    """The cache folder cannot be used this run; `note` says why, once."""

    def __init__(self, note: str) -> None:
        super().__init__(note)
        self.note = note


class Cache:
    def __init__(self, folder: Path | None, notes: list[str] | None = None, base: Path | None = None) -> None:
        """`folder`: the version folder (`Cache.at`); `base`: the folder it is walked beneath (the project's root,
        or where a cache folder outside the project lies), by default the cache folder's parent."""
        self.folder = folder
        self.notes = notes or []  # what the run says once about the cache it could not use
        self.scans: ScanTable = {}
        self.results: ResultTable = {}
        self.judgements: JudgedTable = {}
        self._dirty = False
        self._base = base if base is not None else folder.parent.parent if folder is not None else None
        if folder is not None:
            self._load()

    @classmethod
    def at(cls, root: Path, pack_fp: str, settings_fp: str, project: Path | None = None) -> Cache:
        """The cache folder for this version, code, pack and settings under `root`; no cache where the user has no key,
        or where `root` is a symlink (it could lead anywhere: specguard never follows one to write). `root` inside
        `project` is walked beneath the project's root, so no link leads it out."""
        key, note = _user_key()
        notes = [note] if note else []
        if key is None:
            return cls(None, notes)
        inside = project is not None and relative_inside(root, project) is not None
        return cls(root / folder_name(key, pack_fp, settings_fp), notes, project if inside else root.parent)

    def _load(self) -> None:
        try:
            with self._opened(create=False) as version:
                if version is None:
                    return
                scans = self._read(version, _SCANS, "scans", ScanTable)
                results = self._read(version, _RESULTS, "results", ResultTable)
                judgements = self._read(version, _JUDGED, "judged", JudgedTable)
            self.scans, self.results, self.judgements = scans or {}, results or {}, judgements or {}
        except _NoCache as exc:
            self.notes.append(exc.note)
            self.folder = None

    @contextlib.contextmanager
    def _opened(self, create: bool) -> Any:
        """The version folder, held open (None when it does not exist and `create` is false): each folder from the
        base down opened from the one above it, never through a link, made where missing when `create`."""
        assert self.folder is not None and self._base is not None
        root = self.folder.parent
        relative = os.path.relpath(os.path.abspath(root), os.path.abspath(self._base))
        above, name = os.path.split(relative)
        folders: list[int] = []
        try:
            try:
                if create:
                    os.makedirs(self._base, exist_ok=True)
                folders.append(open_folder(self._base))
                folders.append(open_beneath(folders[-1], above or ".", FOLDER, make_folders=create))
            except FileNotFoundError:
                yield None
                return
            except OutsideTree as exc:
                raise _NoCache(f"the cache folder {root}: {exc.how} leads outside the project; no cache") from None
            made = _open_folder(folders, name, root, create)
            if made is None:
                yield None
                return
            self._require_private(root, folders[-1])
            if made:
                _gitignore(folders[-1])
            if _open_folder(folders, self.folder.name, self.folder, create) is None:
                yield None
                return
            self._require_private(self.folder, folders[-1])
            yield folders[-1]
        finally:
            for fd in folders:
                os.close(fd)

    def _read(self, version: int, name: str, kind: str, payload_type: Any) -> Any | None:
        """A data file of the version folder: None when missing or unreadable; `_NoCache` when it is not private."""
        assert self.folder is not None
        try:
            data, st = read_regular_stat(name, CACHE_CAP, follow=False, dir_fd=version)
        except UnreadableFile:
            return None
        self._require_private(self.folder / name, st)
        return _datafile.decode(data, kind, payload_type)

    def _require_private(self, shown: Path, opened: int | os.stat_result) -> None:
        """Everything from the cache folder down must be the user's alone: another local user who could write there
        could have forged results that hide findings (a shared checkout's cache folder is listed by anyone)."""
        assert self.folder is not None
        why = untrusted(os.fstat(opened) if isinstance(opened, int) else opened, system_ok=False)
        if why is not None:
            raise _NoCache(
                f"the cache folder {self.folder.parent} was not used: {shown}: {why}; another user could have forged "
                "what it holds (remove it, or pass --cache-dir): running without a cache"
            )

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

    def save(self, live_paths: set[str], live_results: set[str]) -> str | None:
        """Write the cache; a note when it could not be stored (the run's results stand, the next run is cold)."""
        if self.folder is None or not self._dirty:
            return None
        self.scans = {p: s for p, s in self.scans.items() if p in live_paths}
        self.results = {k: r for k, r in self.results.items() if k in live_results}
        self.judgements = {p: j for p, j in self.judgements.items() if p in live_paths}
        try:
            with self._opened(create=True) as version:
                if version is None:
                    return None
                _datafile.write(_SCANS, "scans", self.scans, dir_fd=version)
                _datafile.write(_RESULTS, "results", self.results, dir_fd=version)
                _datafile.write(_JUDGED, "judged", self.judgements, dir_fd=version)
        except (OSError, _NoCache):
            pass  # a read-only tree still gets analyzed, just without a cache
        except (ValueError, TypeError, NotImplementedError) as exc:  # what the cache's format could not hold
            return f"the cache in {self.folder.parent} was not saved ({type(exc).__name__}); the next run starts cold"
        return None


def _open_folder(folders: list[int], name: str, shown: Path, create: bool) -> bool | None:
    """Open the folder `name` in the last of `folders` (appended to them) without following a link; whether this
    call made it, or None when it is missing and not to be made. Raises `_NoCache` for a link or a non-folder."""
    try:
        folders.append(os.open(name, FOLDER | getattr(os, "O_NOFOLLOW", 0), dir_fd=folders[-1]))
        return False
    except FileNotFoundError:
        if not create:
            return None
    except OSError as exc:
        raise _not_a_folder(folders[-1], name, shown, exc) from None
    try:
        os.mkdir(name, 0o755, dir_fd=folders[-1])
    except FileExistsError:  # made meanwhile by someone else: used only as it is found, never through a link
        found = _open_folder(folders, name, shown, create=False)
        return None if found is None else False
    folders.append(os.open(name, FOLDER | getattr(os, "O_NOFOLLOW", 0), dir_fd=folders[-1]))
    return True


def _not_a_folder(parent: int, name: str, shown: Path, exc: OSError) -> _NoCache:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        with contextlib.suppress(OSError):
            os.readlink(name, dir_fd=parent)
            return _NoCache(f"the cache folder {shown} is a symlink; specguard does not follow it: no cache")
    return _NoCache(f"the cache folder {shown} cannot be used ({exc.strerror or exc}): no cache")


def _gitignore(folder: int) -> None:
    """Keep the cache out of git, inside the folder specguard just made (never a file that is already there)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(".gitignore", flags, 0o644, dir_fd=folder)
    try:
        os.write(fd, GITIGNORE)
    finally:
        os.close(fd)
