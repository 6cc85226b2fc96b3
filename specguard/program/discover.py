"""Paths to the Python files under them: excludes applied, each file once, missing paths reported."""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from specguard._files import SOURCE_CAP
from specguard.program.ignore_files import Ignores

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
_Key = tuple[int, int]  # (device, inode)


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


# A run's total budget: far above any tree a user checks (vLLM 0.33 holds 3,231 Python files, 50 MB of them;
# SGLang fewer), far below what costs the machine. Links out of the tree are not followed, so only a tree that
# really is this large reaches it (or a folder named on the command line that holds a whole file system). Read at
# each discovery so that a test can lower them in its own process; not a setting.
# What a folder's walk reads, as ruff: modules and their stubs (a stub is checked as a file; see engine.py).
PYTHON_SUFFIXES = (".py", ".pyi")
MAX_FILES = 100_000
MAX_BYTES = 1 << 30
# Folders below a folder named on the command line: far deeper than any project, far shallower than a tree built
# to pass PATH_MAX (4,096 bytes) or Python's recursion limit. Deeper folders are named in a note, not walked.
MAX_DEPTH = 256
_SHOWN_LINKS = 5


@dataclass
class Discovery:
    files: list[str] = field(default_factory=list)  # strings: a Path per file costs more than the scan of it
    errors: list[str] = field(default_factory=list)
    # Paths named on the command line that cannot be read (missing, a broken link, a FIFO), and why: each is a
    # finding of its own (SG000, as ruff's E902), and the other paths are still checked.
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # links out of the tree, not followed
    warnings: list[str] = field(default_factory=list)  # ignore files someone else may have written, not used
    # When the budget ended the walk: which part of it was spent, and the first file left (files past it were not
    # found). None: every file was found.
    stopped: tuple[str, str] | None = None


class _Walker:
    """Exclusion by name or by the path from the configuration root (as ruff matches them, so the same files are
    excluded whichever way the paths were typed), what ignore files exclude, each file and folder visited once,
    never a link out of the trees (the real paths of the folders given), and the budget."""

    def __init__(self, patterns: Iterable[str], root: Path, trees: list[str], limits: tuple[int, int]) -> None:
        self.root = os.path.realpath(root)
        self.excluded = Excludes(patterns, self.root)
        # Files and folders are known by their real paths, not by (device, inode): an inode freed by an editor's
        # atomic save is reused at once for another file saved, which would then pass for one already reached.
        self.seen_dirs: set[str] = set()
        self.seen_files: set[str] = set()
        self.trees = [tree if tree.endswith(os.sep) else tree + os.sep for tree in trees]
        self.links_out: list[str] = []
        self.special: list[str] = []  # `.py` names that are FIFOs, devices or sockets: never read
        self.broken: list[str] = []  # `.py` names that are links to nothing
        self.not_walked: list[str] = []  # folders past MAX_DEPTH, or with a path too long to open
        self.max_depth = MAX_DEPTH
        self.limits = limits
        self.files_left, self.bytes_left = limits
        self.stopped_at: str | None = None  # the first file past the budget
        self.spent = ""  # which part of the budget it was past

    def inside(self, real: str) -> bool:
        """Whether a real path lies in one of the trees."""
        return any((real + os.sep).startswith(tree) for tree in self.trees)

    def take(self, path: str, size: int) -> bool:
        """Charge one file of `size` bytes to the budget; False past it, and the walk stops there. A file is charged
        what the reader may read of it, at most SOURCE_CAP: a larger one (a 16 GiB sparse file) is refused from its
        status before any byte is read (SG000), so it neither costs the run nor ends the walk for the files after
        it."""
        if self.stopped_at is not None:
            return False
        size = min(size, SOURCE_CAP)
        if self.files_left == 0:
            self.spent = f"{self.limits[0]:,} Python files"
        elif size > self.bytes_left:
            self.spent = f"{self.limits[1]:,} bytes of Python"
        else:
            self.files_left -= 1
            self.bytes_left -= size
            return True
        self.stopped_at = path
        return False

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

    @staticmethod
    def first_visit(seen: set[str], real: str) -> bool:
        """False for a folder or file already reached (through a symlink, another spelling or a loop)."""
        if real in seen:
            return False
        seen.add(real)
        return True

    def walk(self, folder: str, rel: str, ignores: Ignores | None, absolute: str) -> Iterator[str]:
        """The files under `folder` (as typed; `absolute` is the same folder as ignore files see it), depth first in
        name order. Iterative, with a stack of open listings, so no nesting reaches Python's recursion limit; a
        folder deeper than MAX_DEPTH, or whose path the system refuses as too long, is not walked and is named in
        one note."""
        top = self.listing(folder, rel, ignores, absolute, os.path.realpath(folder), ())
        stack = [top] if top is not None else []
        while stack and self.stopped_at is None:
            here = stack[-1]
            entry = next(here.entries, None)
            if entry is None:
                stack.pop()
                continue
            entry_rel = here.prefix + entry.name
            if self.excluded(entry.name, entry_rel):
                continue
            try:
                is_dir = entry.is_dir()
                if here.ignores is not None and here.ignores.ignored(f"{here.absolute}/{entry.name}", is_dir):
                    continue
                link = entry.is_symlink()
                if link and not is_dir and entry.name.endswith(PYTHON_SUFFIXES) and not os.path.exists(entry.path):
                    self.broken.append(entry.path)  # a source that cannot be read, wherever it pointed: SG000
                    continue
                real = os.path.realpath(entry.path) if link else f"{here.real}/{entry.name}"
                if link and not self.inside(real):
                    if is_dir or entry.name.endswith(PYTHON_SUFFIXES):  # what would have been read
                        self.links_out.append(f"{_as_printed(entry.path)} -> {real}")
                    continue
                if is_dir:
                    if len(stack) > self.max_depth:
                        self.not_walked.append(f"{_as_printed(entry.path)} (deeper than {self.max_depth} folders)")
                        continue
                    below = self.listing(
                        entry.path, entry_rel, here.ignores, f"{here.absolute}/{entry.name}", real, here.above
                    )
                    if below is not None:
                        stack.append(below)
                elif entry.name.endswith(PYTHON_SUFFIXES) and entry.is_file():  # regular: never a FIFO or a device
                    if self.first_visit(self.seen_files, real) and self.take(entry.path, entry.stat().st_size):
                        yield entry.path
                elif entry.name.endswith(PYTHON_SUFFIXES):
                    self.special.append(f"{_as_printed(entry.path)} ({_kind(entry.stat(follow_symlinks=False))})")
            except OSError:
                continue

    def listing(
        self, folder: str, rel: str, ignores: Ignores | None, absolute: str, real: str, above: tuple[_Key, ...]
    ) -> _Listing | None:
        """A folder's entries to walk, in name order; None for a folder already walked or that cannot be listed.
        `above`: the identities of the folders it lies in, so that a loop no real path shows (a bind mount of a
        folder inside itself) is walked once; only those, which exist while it does, so a reused inode cannot
        pass for one of them."""
        try:
            st = os.stat(folder)
            key = (st.st_dev, st.st_ino)
            if key in above or not self.first_visit(self.seen_dirs, real):
                return None
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:
                self.not_walked.append(f"{_as_printed(folder)[:200]}... (a path longer than the system allows)")
            return None
        if ignores is not None:
            ignores = ignores.enter(absolute, {e.name for e in entries})
        return _Listing(iter(entries), "" if rel == "." else rel + "/", ignores, absolute, real, (*above, key))


@dataclass
class _Listing:
    """One folder of the walk's stack: the entries still to visit, and what applies to them."""

    entries: Iterator[os.DirEntry[str]]
    prefix: str  # the folder's path from the configuration root, with a trailing `/` ("" for the root)
    ignores: Ignores | None
    absolute: str
    real: str  # its real path: an entry that is not a link is `real/name`
    above: tuple[_Key, ...]  # its own identity and those of the folders it lies in


def _kind(st: os.stat_result) -> str:
    return {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device"}.get(
        stat.S_IFMT(st.st_mode), "not a regular file"
    )


def _as_printed(path: str) -> str:
    """A walked path as Path would print it (`./x.py` is `x.py`)."""
    return path[2:] if path.startswith("./") else path


def _links_note(links: list[str]) -> str:
    shown = "; ".join(links[:_SHOWN_LINKS])
    more = f"; and {len(links) - _SHOWN_LINKS} more" if len(links) > _SHOWN_LINKS else ""
    if len(links) == 1:
        return (
            f"1 symlink leads out of the folders checked and was not followed: {shown}; name its target on the "
            "command line to check it"
        )
    return (
        f"{len(links)} symlinks lead out of the folders checked and were not followed: {shown}{more}; name a target "
        "on the command line to check it"
    )


def force_excluded(path: str, exclude: Iterable[str], root: Path) -> bool:
    """Whether `--force-exclude` skips a path named on the command line (standard input's `--stdin-filename`
    too, which need not exist)."""
    return _Walker(exclude, root, [], (MAX_FILES, MAX_BYTES)).excluded_path(path)


def discover(
    paths: Iterable[Path],
    exclude: Iterable[str] = DEFAULT_EXCLUDE,
    root: Path | None = None,
    force_exclude: bool = False,
    respect_gitignore: bool = True,
    limits: tuple[int, int] | None = None,
) -> Discovery:
    """Every .py and .pyi file under `paths`, each once however often and however it was named. A path named
    explicitly is analyzed even if excluded, unless `force_exclude`; ignore files prune only what a folder holds
    (a file named explicitly is analyzed whatever they say, as in ruff). A folder's walk never leaves the trees
    through a link, and all of it stops past `limits` (files, bytes; by default MAX_FILES and MAX_BYTES)."""
    paths = list(paths)
    trees = [os.path.realpath(path) for path in paths if os.path.isdir(path)]
    walker = _Walker(exclude, root or Path.cwd(), trees, limits or (MAX_FILES, MAX_BYTES))
    result = Discovery()
    for path in paths:
        if walker.stopped_at is not None:
            break
        if not os.path.lexists(path):
            result.unreadable.append((str(path), "no such file or directory"))
        elif force_exclude and walker.excluded_path(str(path)):
            continue
        elif path.is_dir():
            folder = os.path.normpath(path)
            absolute = os.path.abspath(folder)  # ignore files match the path as walked, links not resolved
            ignores = Ignores.enclosing(absolute) if respect_gitignore else None
            for file in walker.walk(folder, walker.relative(str(path)), ignores, absolute):
                result.files.append(_as_printed(file))
            if ignores is not None:
                result.warnings.extend(w for w in ignores.refused if w not in result.warnings)
        elif path.is_file():
            if walker.first_visit(walker.seen_files, os.path.realpath(path)) and walker.take(
                str(path), path.stat().st_size
            ):
                result.files.append(str(path))
        elif path.exists():  # a FIFO, a device, a socket: reading one would block or never end
            why = "not a regular file or directory (specguard reads regular files only)"
            result.unreadable.append((str(path), why))
        else:
            result.unreadable.append((str(path), "not a file or directory (a broken symlink?)"))
    result.unreadable.extend((_as_printed(p), "not a file or directory (a broken symlink?)") for p in walker.broken)
    if walker.links_out:
        result.notes.append(_links_note(walker.links_out))
    if walker.special:
        shown = "; ".join(walker.special[:_SHOWN_LINKS])
        more = f"; and {len(walker.special) - _SHOWN_LINKS} more" if len(walker.special) > _SHOWN_LINKS else ""
        result.notes.append(f"not regular files, so not read: {shown}{more}")
    if walker.not_walked:
        more = f"; and {len(walker.not_walked) - 1} more" if len(walker.not_walked) > 1 else ""
        result.notes.append(
            f"folders not walked: {walker.not_walked[0]}{more}; name a folder nearer to them to check what they hold"
        )
    if walker.stopped_at is not None:
        result.stopped = (walker.spent, walker.stopped_at)
        result.errors.append(
            f"the folders checked hold more than one run reads ({walker.spent}): the files found before "
            f"{_as_printed(walker.stopped_at)} were checked and the rest were not; check fewer folders per run"
        )
    return result


def modules_fingerprint(package: str | Path) -> str:
    """Each module's path, size and modification time under `package` (a stat each: 5 ms for specguard's, 30 ms for
    a vLLM release): what changes when a module of the tree is edited, added or removed."""
    digest = hashlib.blake2b(digest_size=16)
    for folder, folders, files in os.walk(package):
        folders.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                st = os.stat(os.path.join(folder, name))
                digest.update(f"{os.path.relpath(folder, package)}/{name}/{st.st_size}/{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()
