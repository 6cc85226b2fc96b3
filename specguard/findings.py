"""A finding: one reported problem at one place. Plain data, so it goes into the cache and to worker processes."""

from __future__ import annotations

from dataclasses import dataclass, field

from specguard.fix_model import Fix


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


@dataclass(frozen=True, order=True)
class Judgement:
    """What a rule on the evaluator concluded about one site of a file (computed where the whole project is known,
    rendered as a finding by the rule in the file's worker). Plain data: it goes into the cache with the file's
    facts. `decided` False: the evaluation could not tell (an unresolved call, a budget), `why` says what; such a
    site is counted, never reported as a finding."""

    code: str
    scope: str  # the qualified scope the site is in, e.g. "DFlashSpeculator.propose"
    span: tuple[int, int, int, int]  # ast positions in the file: line, byte column, end line, end byte column
    decided: bool
    message: str = ""
    why: str = ""
    details: tuple[tuple[str, str], ...] = ()  # what the rule's fix needs, as it chose to write it

    def detail(self, key: str) -> str | None:
        return next((value for name, value in self.details if name == key), None)
