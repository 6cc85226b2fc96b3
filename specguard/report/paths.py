"""Where the CI formats' paths start: GitHub resolves SARIF and annotation paths from the repository's root,
whatever folder specguard ran in."""

from __future__ import annotations

from pathlib import Path


def report_root(config_root: Path) -> Path:
    """The git repository's root at or above the configuration root (the folder holding `.git`, a folder or a
    worktree's file), else the configuration root itself."""
    start = config_root.resolve()
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return start
