"""Mutated copies of a real vLLM release for the config pre-flight tests: a fork as a user would have it.

The copy hard-links every file of the cached release (a copy where the file system cannot link), and a mutated
file is written anew in the copy, so the cached release is never touched.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def fork(release: Path, into: Path) -> Path:
    """A copy of the `vllm/` dir `release` under `into`; returns the copy's `vllm/` dir."""
    target = into / "vllm"
    shutil.copytree(release, target, copy_function=_link_or_copy)
    return target


def rewrite(tree: Path, relpath: str, change: Callable[[str], str]) -> None:
    """Replace one file of the copy with `change(text)`; the change must change something."""
    path = tree / relpath
    text = path.read_text(encoding="utf-8")
    new = change(text)
    assert new != text, f"the mutation of {relpath} changed nothing"
    path.unlink()  # a hard link: never write through it into the cached release
    path.write_text(new, encoding="utf-8")


def replace(old: str, new: str, count: int = 1) -> Callable[[str], str]:
    """A change that replaces `old` (which must occur `count` times) by `new`."""

    def change(text: str) -> str:
        assert text.count(old) == count, f"expected {count} of {old!r}, found {text.count(old)}"
        return text.replace(old, new)

    return change
