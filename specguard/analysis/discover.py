"""Paths to the Python files under them: excludes applied, each file once, missing paths reported."""

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
    """Exclusion by name or by the path relative to the configuration root (as ruff matches them, so the
    same files are excluded whichever way the paths were typed), and each file and folder visited once."""

    def __init__(self, patterns: tuple[str, ...], root: Path) -> None:
        self.patterns = patterns
        self.root = os.path.realpath(root)
        self.seen_dirs: set[tuple[int, int]] = set()
        self.seen_files: set[tuple[int, int]] = set()

    def excluded(self, name: str, rel: str) -> bool:
        if name in DEFAULT_EXCLUDES:
            return True
        return any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(rel, p) for p in self.patterns)

    def relative(self, path: str) -> str:
        """`path` relative to the root, or absolute when outside it (posix separators either way)."""
        real = os.path.realpath(path)
        rel = os.path.relpath(real, self.root)
        return Path(real if rel == ".." or rel.startswith(".." + os.sep) else rel).as_posix()

    def excluded_path(self, path: str) -> bool:
        """A path named on the command line, under force-exclude: it or a folder above it up to the root (a path
        outside the root only by itself: an installed vLLM under site-packages is no less checked)."""
        rel = self.relative(path)
        parts = rel.split("/")
        first = len(parts) - 1 if rel.startswith("/") else 0
        return any(self.excluded(parts[i], "/".join(parts[: i + 1])) for i in range(first, len(parts)))

    def first_visit(self, seen: set[tuple[int, int]], path: str) -> bool:
        """False for a folder or file already reached (through a symlink, another spelling or a loop)."""
        try:
            st = os.stat(path)
        except OSError:
            return False
        return self.first_key(seen, (st.st_dev, st.st_ino))

    @staticmethod
    def first_key(seen: set[tuple[int, int]], key: tuple[int, int]) -> bool:
        if key in seen:
            return False
        seen.add(key)
        return True

    def walk(self, folder: str, rel: str) -> Iterator[str]:
        try:
            st = os.stat(folder)
        except OSError:
            return
        if not self.first_key(self.seen_dirs, (st.st_dev, st.st_ino)):
            return
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            return
        prefix = "" if rel == "." else rel + "/"
        for entry in entries:
            entry_rel = prefix + entry.name
            if self.excluded(entry.name, entry_rel):
                continue
            try:
                if entry.is_dir():
                    yield from self.walk(entry.path, entry_rel)
                elif entry.name.endswith(".py") and entry.is_file():
                    # a plain file's identity needs no stat: its folder's device and the inode scandir read
                    if entry.is_symlink():
                        fresh = self.first_visit(self.seen_files, entry.path)
                    else:
                        fresh = self.first_key(self.seen_files, (st.st_dev, entry.inode()))
                    if fresh:
                        yield entry.path
            except OSError:
                continue


def discover(
    paths: Iterable[Path], exclude: Iterable[str] = (), root: Path | None = None, force_exclude: bool = False
) -> Discovery:
    """Every .py file under `paths`, each once however often and however it was named. A path named
    explicitly is analyzed even if excluded, unless `force_exclude`."""
    walker = _Walker(tuple(exclude), root or Path.cwd())
    result = Discovery()
    for path in paths:
        if not os.path.lexists(path):
            result.errors.append(f"{path}: no such file or directory")
        elif force_exclude and walker.excluded_path(str(path)):
            continue
        elif path.is_dir():
            for file in walker.walk(os.path.normpath(path), walker.relative(str(path))):
                result.files.append(file[2:] if file.startswith("./") else file)  # as Path would print it
        elif path.is_file():
            if walker.first_visit(walker.seen_files, str(path)):
                result.files.append(str(path))
        elif path.exists():  # a FIFO, a device, a socket: reading one would block or never end
            result.errors.append(f"{path}: not a regular file or directory; specguard reads regular files only")
        else:
            result.errors.append(f"{path}: not a file or directory (a broken symlink?)")
    return result
