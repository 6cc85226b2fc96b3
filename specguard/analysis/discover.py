"""Paths to the Python files under them: excludes applied, each file once, missing paths reported."""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from specguard.analysis.ignore_files import Ignores

# ruff's default `exclude`, and specguard's own cache. Names, matched as the cheap set lookup they are.
DEFAULT_EXCLUDE = (
    ".bzr",
    ".direnv",
    ".eggs",
    ".git",
    ".git-rewrite",
    ".hg",
    ".ipynb_checkpoints",
    ".mypy_cache",
    ".nox",
    ".pants.d",
    ".pyenv",
    ".pytest_cache",
    ".pytype",
    ".ruff_cache",
    ".specguard_cache",
    ".svn",
    ".tox",
    ".venv",
    ".vscode",
    "__pypackages__",
    "_build",
    "buck-out",
    "dist",
    "node_modules",
    "site-packages",
    "venv",
)
_GLOB = frozenset("*?[")


def _any_of(globs: list[str]) -> re.Pattern[str] | None:
    return re.compile("|".join(fnmatch.translate(g) for g in globs)) if globs else None


class Excludes:
    """`exclude` patterns as ruff matches them: a pattern without a `/` against each file's and folder's name, one
    with a `/` against its path, anchored at the configuration root (or absolute, as the CLI anchors its own)."""

    def __init__(self, patterns: Iterable[str], root: str) -> None:
        names = [p for p in patterns if "/" not in p]
        self.plain = frozenset(p for p in names if not _GLOB & set(p))
        self.names = _any_of([p for p in names if _GLOB & set(p)])
        self.paths = _any_of([p if p.startswith("/") else f"{root}/{p}" for p in patterns if "/" in p])
        self.root = root

    def __call__(self, name: str, rel: str) -> bool:
        if name in self.plain or (self.names is not None and self.names.match(name)):
            return True
        return self.paths is not None and self.paths.match(rel if rel.startswith("/") else f"{self.root}/{rel}")


@dataclass
class Discovery:
    files: list[str] = field(default_factory=list)  # strings: a Path per file costs more than the scan of it
    errors: list[str] = field(default_factory=list)


class _Walker:
    """Exclusion by name or by the path from the configuration root (as ruff matches them, so the same files are
    excluded whichever way the paths were typed), what ignore files exclude, and each file and folder visited once."""

    def __init__(self, patterns: Iterable[str], root: Path) -> None:
        self.root = os.path.realpath(root)
        self.excluded = Excludes(patterns, self.root)
        self.seen_dirs: set[tuple[int, int]] = set()
        self.seen_files: set[tuple[int, int]] = set()

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

    def walk(self, folder: str, rel: str, ignores: Ignores | None, absolute: str) -> Iterator[str]:
        """The files under `folder` (as typed; `absolute` is the same folder as ignore files see it)."""
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
        if ignores is not None:
            ignores = ignores.enter(absolute, {e.name for e in entries})
        for entry in entries:
            entry_rel = prefix + entry.name
            if self.excluded(entry.name, entry_rel):
                continue
            try:
                is_dir = entry.is_dir()
                if ignores is not None and ignores.ignored(f"{absolute}/{entry.name}", is_dir):
                    continue
                if is_dir:
                    yield from self.walk(entry.path, entry_rel, ignores, f"{absolute}/{entry.name}")
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
    paths: Iterable[Path],
    exclude: Iterable[str] = DEFAULT_EXCLUDE,
    root: Path | None = None,
    force_exclude: bool = False,
    respect_gitignore: bool = True,
) -> Discovery:
    """Every .py file under `paths`, each once however often and however it was named. A path named
    explicitly is analyzed even if excluded, unless `force_exclude`; ignore files prune only what a folder holds
    (a file named explicitly is analyzed whatever they say, as in ruff)."""
    walker = _Walker(exclude, root or Path.cwd())
    result = Discovery()
    for path in paths:
        if not os.path.lexists(path):
            result.errors.append(f"{path}: no such file or directory")
        elif force_exclude and walker.excluded_path(str(path)):
            continue
        elif path.is_dir():
            folder = os.path.normpath(path)
            absolute = os.path.abspath(folder)  # ignore files match the path as walked, links not resolved
            ignores = Ignores.above(os.path.dirname(absolute)) if respect_gitignore else None
            for file in walker.walk(folder, walker.relative(str(path)), ignores, absolute):
                result.files.append(file[2:] if file.startswith("./") else file)  # as Path would print it
        elif path.is_file():
            if walker.first_visit(walker.seen_files, str(path)):
                result.files.append(str(path))
        else:
            result.errors.append(f"{path}: not a file or directory (a broken symlink?)")
    return result
