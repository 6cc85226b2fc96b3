"""Where a project ends, looking up from a path inside it.

The project's root is the first folder, at or above the path checked, holding `.git` (a folder, or a worktree's
file) or a `pyproject.toml` (with or without [tool.specguard]), as ruff stops. Settings and ignore files are looked
for up to that folder and never above it: whoever can write a folder that holds the checkout (a world-writable
/tmp) must not choose what specguard checks or where it writes.
"""

from __future__ import annotations

import os

ROOT_MARKERS = (".git", "pyproject.toml")
REPOSITORY_MARKERS = (".git",)


def project_top(folder: str, markers: tuple[str, ...] = ROOT_MARKERS) -> str | None:
    """The project's root at or above `folder` (an absolute path, taken as spelled), or None when no folder up to
    `/` holds a marker. `REPOSITORY_MARKERS`: the root of the checkout, for ruff's configuration, which a
    pyproject.toml without [tool.ruff] does not end (ruff looks further up, within the repository)."""
    here = folder
    while True:
        if any(os.path.lexists(os.path.join(here, marker)) for marker in markers):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent
