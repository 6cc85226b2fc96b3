"""What a fix is, as plain data: ruff's model, so that the JSON and SARIF reports can carry it as it is.

A fix is an applicability (safe: keeps the code's meaning; unsafe: may change it, applied only with
`--unsafe-fixes`), a one-line message saying what it does, and text edits on the original source, each the
replacement of a span by new text. Findings carry their fix into the cache, so these stay plain frozen dataclasses
of strings and integers (no libcst node), and importing this module costs nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import libcst as cst

from specguard.lines import line_starts, source_lines

Applicability = Literal["safe", "unsafe"]
# A node of the module a rule was given and what replaces it: a libcst transformation (a type only, so that
# importing the model still costs nothing).
Change = tuple["cst.CSTNode", "cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel[cst.CSTNode]"]


@dataclass(frozen=True)
class Edit:
    """Replace the text from (line, col) up to (end_line, end_col), 1-based and end-exclusive, by `content`."""

    content: str
    line: int
    col: int
    end_line: int
    end_col: int

    @property
    def start(self) -> tuple[int, int]:
        return self.line, self.col

    @property
    def end(self) -> tuple[int, int]:
        return self.end_line, self.end_col


@dataclass(frozen=True)
class Fix:
    applicability: Applicability
    message: str
    edits: tuple[Edit, ...]

    def applies(self, unsafe_fixes: bool | None) -> bool:
        """Whether `--fix` applies it: safe fixes always, unsafe ones only with `--unsafe-fixes`."""
        return self.applicability == "safe" or unsafe_fixes is True

    def overlaps(self, others: Sequence[Fix]) -> bool:
        """Two fixes overlap when any of their edits touch, as in ruff: the second waits for a re-check."""
        for mine in self.edits:
            for other in (e for fix in others for e in fix.edits):
                if mine.start <= other.end and other.start <= mine.end:
                    return True
        return False


@dataclass(frozen=True)
class NodeFix:
    """A fix as a rule writes it: nodes of the module it was given, replaced or removed (a libcst
    transformation), plus text edits for what lies outside the definitions rules see (an import line).
    The engine turns the changes into text edits on the original source."""

    applicability: Applicability
    message: str
    changes: tuple[Change, ...]
    edits: tuple[Edit, ...] = ()


@dataclass(frozen=True)
class NoFix:
    """Why a finding gets no fix; the rule says it in the finding's message, so every output format carries it."""

    reason: str


def fix_of(applicability: Applicability, message: str, edits: Iterable[Edit]) -> Fix | None:
    """A fix made of these edits, in order; none without an edit."""
    ordered = tuple(sorted(edits, key=lambda e: (e.start, e.end)))
    return Fix(applicability, message, ordered) if ordered else None


@functools.lru_cache(maxsize=8)  # a file's source and sparse text, and each fix's own small ones
def split_lines(text: str) -> tuple[str, ...]:
    """Lines with their endings, as CPython ends them (specguard/lines.py), as line numbers in edits count them.
    A file is split once for all the fixes that ask (a split a fix was quadratic in the file's size); the lines
    are a tuple, shared by every caller, so a caller that edits them makes its own list."""
    return tuple(source_lines(text))


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    """`text` with non-overlapping edits applied; positions are 1-based (line, column) in `text`."""
    starts = line_starts(text)

    def offset(line: int, col: int) -> int:
        return (starts[line - 1] if line <= len(starts) else len(text)) + col - 1

    out, done = [], 0
    for edit in sorted(edits, key=lambda e: (e.start, e.end)):
        start, end = offset(*edit.start), offset(*edit.end)
        if start < done:
            raise ValueError(f"overlapping edits at line {edit.line}")
        out += [text[done:start], edit.content]
        done = end
    return "".join([*out, text[done:]])
