"""What the config pre-flight and `specguard doctor` read of `specguard check` over the served tree.

deploy/ is a client of the evaluator beside the rules, below the engine: it never runs the engine itself. The
composition (`specguard.composition.check_served_tree`) hands it a `TreeChecker`; without one, every hazard that
depends on a finding is "not judged", never passed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CheckedFinding:
    code: str
    path: Path  # resolved
    line: int
    message: str


@dataclass(frozen=True)
class TreeCheck:
    """`specguard check` over one tree, as the pre-flight needs it."""

    files: int  # how many files it analyzed
    findings: tuple[CheckedFinding, ...]
    # what may hide a finding: internal errors, discovery's notes (a link out of the tree, not followed), and files
    # the analyzer could not read (SG000)
    problems: tuple[str, ...]
    errors: tuple[str, ...]
    # when its budget stopped it: which part was spent, and the files it analyzed before (resolved)
    left: tuple[str, frozenset[Path]] | None = None
    # the sites a rule could not decide, each with why (its message)
    undecided: tuple[CheckedFinding, ...] = ()


TreeChecker = Callable[[Path], TreeCheck]
