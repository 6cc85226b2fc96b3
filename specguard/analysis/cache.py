"""The per-file cache: scans keyed by (size, mtime), rule results keyed by content and the facts they used.

The cache lives in the analyzed tree, so it is treated as hostile input. Its files are data (specguard/_datafile.py:
msgpack decoded into FileScan and Finding with every field type-checked), never code. Its folder is named by a keyed
hash of (specguard version, pack, settings) under a random key kept in the user's cache: a cache folder committed to
the repository, or copied from another machine, is never found, so it can neither run code nor hide findings. Writes
are atomic (temp file + rename) so a run interrupted mid-write leaves the previous cache usable.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from pathlib import Path

from specguard import __version__, _datafile
from specguard._snapshots import user_cache_home
from specguard.analysis.findings import Finding
from specguard.analysis.scan import FileScan

_FORMAT = 7  # bump when a cached type changes shape
_SCANS, _RESULTS = "scans.msgpack", "results.msgpack"
GITIGNORE = b"*\n"  # what the cache root's .gitignore holds, so that no one commits the cache
_VERSION_FOLDER = re.compile(r"v[\w.+!-]+-[0-9a-f]{32}")  # Cache.at's names, of any specguard version
ScanTable = dict[str, FileScan]
ResultTable = dict[str, list[Finding]]


def _user_key() -> bytes | None:
    """This user's random cache key, made on first use; None where it can be neither read nor stored."""
    path = user_cache_home() / "cache-key"
    key = _datafile.read(path, "cache-key", bytes)
    if isinstance(key, bytes) and len(key) == 32:
        return key
    key = secrets.token_bytes(32)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _datafile.write(path, "cache-key", key)  # mode 0600, like every temp file it is renamed from
    except OSError:
        return None
    return key


def version_folder_name(name: str) -> bool:
    """Whether `name` is a cache folder's name as `Cache.at` makes them, for any version (`specguard clean`)."""
    return _VERSION_FOLDER.fullmatch(name) is not None


class Cache:
    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.scans: ScanTable = {}
        self.results: ResultTable = {}
        self._dirty = False
        if folder is not None:
            self.scans = _datafile.read(folder / _SCANS, "scans", ScanTable) or {}
            self.results = _datafile.read(folder / _RESULTS, "results", ResultTable) or {}

    @classmethod
    def at(cls, root: Path, pack_fp: str, settings_fp: str) -> Cache:
        """The cache folder for this version, pack and settings; no cache where the user has no key."""
        key = _user_key()
        if key is None:
            return cls(None)
        name = hashlib.blake2b(f"{__version__}/{_FORMAT}/{pack_fp}/{settings_fp}".encode(), key=key, digest_size=16)
        return cls(root / f"v{__version__}-{name.hexdigest()}")

    def put_scan(self, path: str, scan: FileScan) -> None:
        self.scans[path] = scan
        self._dirty = True

    def put_result(self, key: str, findings: list[Finding]) -> None:
        self.results[key] = findings
        self._dirty = True

    def save(self, live_paths: set[str], live_results: set[str]) -> None:
        if self.folder is None or not self._dirty:
            return
        self.scans = {p: s for p, s in self.scans.items() if p in live_paths}
        self.results = {k: r for k, r in self.results.items() if k in live_results}
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            gitignore = self.folder.parent / ".gitignore"
            if not gitignore.exists():
                gitignore.write_bytes(GITIGNORE)
            _datafile.write(self.folder / _SCANS, "scans", self.scans)
            _datafile.write(self.folder / _RESULTS, "results", self.results)
        except OSError:
            pass  # a read-only tree still gets analyzed, just without a cache
