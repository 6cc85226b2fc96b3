"""Where a project ends, looking up from a path inside it.

The project's root is the first folder, at or above the path checked, holding `.git` (a folder, or a worktree's
file) or a `pyproject.toml` (with or without [tool.specguard]), as ruff stops. Settings and ignore files are looked
for up to that folder and never above it: whoever can write a folder that holds the checkout (a world-writable
/tmp) must not choose what specguard checks or where it writes.
"""

from __future__ import annotations

import os

ROOT_MARKERS = (".git", "pyproject.toml")


def project_top(folder: str) -> str | None:
    """The project's root at or above `folder` (an absolute path, taken as spelled), or None when no folder up to
    `/` holds a marker."""
    here = folder
    while True:
        if any(os.path.lexists(os.path.join(here, marker)) for marker in ROOT_MARKERS):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent
