"""Paths to the Python files under them: excludes applied, symlinks followed once, missing paths reported."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Folders no one wants analyzed; like ruff's defaults. Matched by name, the cheap way.
DEFAULT_EXCLUDES = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        "__pycache__",
        ".tox",
        ".nox",
        "build",
        "dist",
        "node_modules",
        ".specguard_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".eggs",
        "site-packages",
    }
)


@dataclass
class Discovery:
    files: list[str] = field(default_factory=list)  # strings: a Path per file costs more than the scan of it
    errors: list[str] = field(default_factory=list)


class _Walker:
    def __init__(self, patterns: tuple[str, ...]) -> None:
        self.patterns = patterns
        self.seen_dirs: set[tuple[int, int]] = set()
        self.seen_files: set[tuple[int, int]] = set()

    def excluded(self, name: str, path: str) -> bool:
        if name in DEFAULT_EXCLUDES:
            return True
        return any(
            fnmatch.fnmatch(name, p) or fnmatch.fnmatch(path, p) or fnmatch.fnmatch(path, f"*/{p}")
            for p in self.patterns
        )

    def first_visit(self, seen: set[tuple[int, int]], path: str) -> bool:
        """False for a folder or file already reached (through a symlink, or a loop back up the tree)."""
        try:
            st = os.stat(path)
        except OSError:
            return False
        key = (st.st_dev, st.st_ino)
        if key in seen:
            return False
        seen.add(key)
        return True

    def walk(self, root: str) -> Iterator[str]:
        if not self.first_visit(self.seen_dirs, root):
            return
        try:
            entries = sorted(os.scandir(root), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            if self.excluded(entry.name, entry.path):
                continue
            try:
                if entry.is_dir():
                    yield from self.walk(entry.path)
                # Only a symlinked file can be reached twice; plain files skip the extra stat.
                elif (
                    entry.name.endswith(".py")
                    and entry.is_file()
                    and (not entry.is_symlink() or self.first_visit(self.seen_files, entry.path))
                ):
                    yield entry.path
            except OSError:
                continue


def discover(paths: Iterable[Path], exclude: Iterable[str] = ()) -> Discovery:
    """Every .py file under `paths`, each once. A file named explicitly is analyzed even if excluded."""
    walker = _Walker(tuple(exclude))
    result = Discovery()
    listed: set[str] = set()
    for path in paths:
        if not os.path.lexists(path):
            result.errors.append(f"{path}: no such file or directory")
        elif path.is_dir():
            for file in walker.walk(os.path.normpath(path)):
                file = file[2:] if file.startswith("./") else file  # as Path would print it
                if file not in listed:
                    listed.add(file)
                    result.files.append(file)
        elif path.is_file():
            if str(path) not in listed:
                listed.add(str(path))
                result.files.append(str(path))
        else:
            result.errors.append(f"{path}: not a file or directory (a broken symlink?)")
    return result
