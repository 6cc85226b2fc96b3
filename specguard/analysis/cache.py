"""The per-file cache: scans keyed by (size, mtime), rule results keyed by content and the facts they used.

One folder per (specguard version, pack, settings) so that changing any of them starts from scratch. Writes
are atomic (temp file + rename) so a run interrupted mid-write leaves the previous cache usable.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

from specguard import __version__

_FORMAT = 2  # bump when a cached type changes shape


class Cache:
    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.scans: dict[str, Any] = {}
        self.results: dict[str, Any] = {}
        self._dirty = False
        if folder is not None:
            self.scans = self._load("scans.pickle")
            self.results = self._load("results.pickle")

    @classmethod
    def at(cls, root: Path, pack_fp: str, settings_fp: str) -> Cache:
        return cls(root / f"v{__version__}-f{_FORMAT}-{pack_fp}-{settings_fp}")

    def _load(self, name: str) -> dict[str, Any]:
        assert self.folder is not None
        try:
            with open(self.folder / name, "rb") as fh:
                data = pickle.load(fh)
            return data if isinstance(data, dict) else {}
        except Exception:  # noqa: BLE001 - a missing, truncated or foreign cache only means a slower run
            return {}

    def put_scan(self, path: str, scan: Any) -> None:
        self.scans[path] = scan
        self._dirty = True

    def put_result(self, key: str, findings: Any) -> None:
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
                gitignore.write_text("*\n")
            for name, data in (("scans.pickle", self.scans), ("results.pickle", self.results)):
                fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
                with os.fdopen(fd, "wb") as fh:
                    pickle.dump(data, fh, protocol=pickle.HIGHEST_PROTOCOL)
                os.replace(tmp, self.folder / name)
        except OSError:
            pass  # a read-only tree still gets analyzed, just without a cache
