"""A finding: one reported problem at one place. Plain data, so it goes into the cache and to worker processes."""

from __future__ import annotations

from dataclasses import dataclass, field

from specguard.fixes.model import Fix


@dataclass(frozen=True, order=True)
class Finding:
    path: str
    line: int
    col: int
    code: str
    message: str
    end_line: int = 0
    end_col: int = 0
    symbol: str | None = None  # the qualified scope it was found in, e.g. "DFlashSpeculator.propose"
    fix: Fix | None = field(default=None, compare=False)  # what `--fix` would change, if the rule offers it


def source_error(path: str, reason: str, line: int = 1) -> Finding:
    """SG000: the file could not be analyzed; the other files still are."""
    return Finding(path, line, 1, "SG000", reason, line, 1)
