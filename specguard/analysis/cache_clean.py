"""`specguard clean`: removes the cache folders specguard wrote, and only what specguard wrote in them.

A cache folder lives in the analyzed tree, so what is in it may not be specguard's: a version folder is removed only
when it holds nothing but the cache's own files, and links are never followed (a `.specguard_cache` that links
elsewhere is left alone).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from specguard.analysis.cache import _RESULTS, _SCANS, GITIGNORE, version_folder_name

CACHE_DIR_NAME = ".specguard_cache"
_DATA = {_SCANS, _RESULTS}
_TEMP = re.compile(rf"\.(?:{re.escape(_SCANS)}|{re.escape(_RESULTS)})\..+\.tmp")  # an interrupted atomic write


@dataclass
class Cleaned:
    removed: list[Path] = field(default_factory=list)  # cache folders removed whole
    left: list[str] = field(default_factory=list)  # what was not specguard's, with why


def cache_folders(start: Path) -> Iterator[Path]:
    """Every `.specguard_cache` at or under `start`, without following links."""
    for folder, subfolders, _ in os.walk(start):
        if CACHE_DIR_NAME in subfolders:
            yield Path(folder) / CACHE_DIR_NAME
            subfolders.remove(CACHE_DIR_NAME)  # nothing of another project's lies inside a cache


def _is_file(entry: os.DirEntry[str]) -> bool:
    return entry.is_file(follow_symlinks=False)


def _owned(entry: os.DirEntry[str]) -> bool:
    """A file or version folder specguard writes into a cache folder, as specguard writes it."""
    if entry.name == ".gitignore":
        try:
            return _is_file(entry) and Path(entry.path).read_bytes() == GITIGNORE
        except OSError:
            return False
    if not entry.is_dir(follow_symlinks=False) or not version_folder_name(entry.name):
        return False
    with os.scandir(entry.path) as inside:
        return all(_is_file(e) and (e.name in _DATA or _TEMP.fullmatch(e.name)) for e in inside)


def clean(folder: Path, result: Cleaned) -> None:
    """Remove specguard's files from a cache folder, and the folder once nothing else is left in it."""
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        result.left.append(f"{folder}: not a folder (a link?); left alone")
        return
    others = 0
    with os.scandir(folder) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if not _owned(entry):
                result.left.append(f"{entry.path}: not written by specguard; left alone")
                others += 1
            elif entry.is_dir(follow_symlinks=False):
                for inner in os.scandir(entry.path):
                    os.unlink(inner.path)
                os.rmdir(entry.path)
            else:
                os.unlink(entry.path)
    if not others:
        os.rmdir(folder)
        result.removed.append(folder)
