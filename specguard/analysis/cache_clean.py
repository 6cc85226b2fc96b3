"""`specguard clean`: removes the cache folders specguard wrote, and only what specguard wrote in them.

A cache folder lives in the analyzed tree, so what is in it may not be specguard's: a version folder is removed only
when it holds nothing but the cache's own files, and links are never followed (a `.specguard_cache` that links
elsewhere, or a version folder or `.gitignore` in it that is a link, is left alone). Folders are opened once,
beneath a handle held on the folder cleaned (`_files.open_beneath`), and worked on through their descriptors, so a
folder swapped for a link meanwhile is not followed either, on the way to the cache or inside it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from specguard._files import FOLDER, OutsideTree, UnreadableFile, open_beneath, read_regular_stat
from specguard.analysis.cache import DATA_FILES, GITIGNORE, version_folder_name

CACHE_DIR_NAME = ".specguard_cache"
_DATA = set(DATA_FILES)
_TEMP = re.compile(rf"\.(?:{'|'.join(map(re.escape, DATA_FILES))})\..+\.tmp")  # an interrupted atomic write
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


@dataclass
class Cleaned:
    removed: list[Path] = field(default_factory=list)  # cache folders removed whole
    left: list[str] = field(default_factory=list)  # what was not specguard's, with why


def cache_folders(start: Path) -> Iterator[Path]:
    """Every `.specguard_cache` at or under `start`, without following links. Iterative, down to discovery's
    MAX_DEPTH (os.walk recurses, and a tree nested past the recursion limit ended it in a RecursionError)."""
    from specguard.program.discover import MAX_DEPTH

    pending = [(str(start), 0)]
    while pending:
        folder, depth = pending.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError:
            continue  # gone, unreadable, or a path too long to open
        # a cache that is a link is still named (clean leaves it alone, saying so); the walk follows no link
        if any(e.name == CACHE_DIR_NAME and (e.is_dir() or e.is_symlink()) for e in entries):
            yield Path(folder) / CACHE_DIR_NAME
        subfolders = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False) and e.name != CACHE_DIR_NAME)
        if depth < MAX_DEPTH:
            pending.extend((os.path.join(folder, name), depth + 1) for name in reversed(subfolders))


def _is_gitignore(folder_fd: int) -> bool:
    """The cache folder's `.gitignore` holds what specguard writes there (a regular file, never a link's target)."""
    try:
        return read_regular_stat(".gitignore", len(GITIGNORE), follow=False, dir_fd=folder_fd)[0] == GITIGNORE
    except UnreadableFile:
        return False


def _remove_version_folder(name: str, folder_fd: int) -> bool:
    """Remove a version folder that holds only the cache's own files; whether it did."""
    if not version_folder_name(name):
        return False
    try:
        fd = os.open(name, _FOLDER, dir_fd=folder_fd)
    except OSError:
        return False  # a link, or not a folder
    try:
        with os.scandir(fd) as inside:
            entries = list(inside)
        if not all(e.is_file(follow_symlinks=False) and (e.name in _DATA or _TEMP.fullmatch(e.name)) for e in entries):
            return False
        for entry in entries:
            os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=folder_fd)
    return True


def clean(folder: Path, result: Cleaned, root_fd: int, relative: str) -> None:
    """Remove specguard's files from a cache folder, and the folder once nothing else is left in it. `folder` (as
    shown) is `relative` beneath the open folder `root_fd`: the walk there follows no link out of it."""
    above, name = os.path.split(os.path.normpath(relative))
    try:
        parent = open_beneath(root_fd, above or ".", FOLDER)
    except FileNotFoundError:
        return
    except OutsideTree as exc:
        result.left.append(f"{folder}: {exc.how} leads outside the folder cleaned; left alone")
        return
    try:
        _clean(folder, name, parent, result)
    finally:
        os.close(parent)


def _clean(folder: Path, name: str, parent: int, result: Cleaned) -> None:
    try:
        fd = os.open(name, _FOLDER, dir_fd=parent)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        result.left.append(f"{folder}: not a folder (a link?); left alone")
        return
    others = 0
    try:
        with os.scandir(fd) as entries:
            inside = sorted(e.name for e in entries)
        for entry in inside:
            if entry == ".gitignore" and _is_gitignore(fd):
                os.unlink(entry, dir_fd=fd)
            elif not _remove_version_folder(entry, fd):
                result.left.append(f"{folder / entry}: not written by specguard; left alone")
                others += 1
    finally:
        os.close(fd)
    if not others:
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(name, dir_fd=parent)
        result.removed.append(folder)
