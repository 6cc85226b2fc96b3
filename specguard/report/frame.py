"""The code frame of ruff's full format: the source lines around a finding, numbered, with its span marked.

    10 | import os
       |        ^^
    12 |   def f(a=[           a span over lines: `_` from the gutter to its start,
       |  _________^          `|` down its lines, `_` to its last character
    13 | |     1,
    14 | | ]):
       | |_^

Two lines of context on each side, blank lines at the frame's edges left out; a tab shown as four spaces, a control
character as its Unicode control picture (as ruff does: the frame can never drive the terminal), another character
that is not printable as Python escapes it, a wide character as two columns, so the marks stay under their text."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from specguard.findings import Finding
from specguard.report.names import shown
from specguard.report.style import BOLD, BRIGHT_BLUE, BRIGHT_RED, Style

CONTEXT = 2
FOLD = 20  # a span of more lines shows its first and last FOLD // 2, with `...` between


def _piece(char: str) -> str:
    if char == "\t":
        return "    "
    if ord(char) < 0x20:
        return chr(0x2400 + ord(char))
    if char == "\x7f":
        return "\u2421"
    return char if char.isprintable() else shown(char)


def _width(piece: str) -> int:
    if len(piece) != 1:
        return len(piece)
    if unicodedata.combining(piece):
        return 0
    return 2 if unicodedata.east_asian_width(piece) in ("W", "F") else 1


@dataclass(frozen=True)
class _Line:
    text: str  # as shown
    offsets: tuple[int, ...]  # the display column where each character starts, and where the line ends

    @classmethod
    def of(cls, line: str) -> _Line:
        pieces = [_piece(c) for c in line]
        offsets, at = [], 0
        for piece in pieces:
            offsets.append(at)
            at += _width(piece)
        return cls("".join(pieces), (*offsets, at))

    def at(self, col: int) -> int:
        """The display column of 1-based character column `col` (past the end: as if padded with spaces)."""
        index = max(col - 1, 0)
        if index < len(self.offsets):
            return self.offsets[index]
        return self.offsets[-1] + index - (len(self.offsets) - 1)


def _bounds(lines: list[str], first: int, last: int) -> tuple[int, int]:
    """The frame's first and last line: CONTEXT lines around the span, blank ones at the edges left out."""
    top, bottom = max(1, first - CONTEXT), min(len(lines), last + CONTEXT)
    while top < first and not lines[top - 1].strip():
        top += 1
    while bottom > last and not lines[bottom - 1].strip():
        bottom -= 1
    return top, bottom


def frame(lines: list[str], f: Finding, style: Style) -> tuple[int, list[str]]:
    """(the gutter's width, the frame's rows) for `f` in its file's `lines`, from the gutter's first `|` to its
    last (none after a row of marks, as ruff); (0, []) when the finding lies outside them (the file changed since,
    or an error at its end)."""
    first, last = f.line, max(f.end_line or f.line, f.line)
    if not 1 <= first <= len(lines):
        return 0, []
    last = min(last, len(lines))
    top, bottom = _bounds(lines, first, last)
    width = len(str(bottom))
    gutter, mark = (lambda s: style(s, BOLD, BRIGHT_BLUE)), (lambda s: style(s, BOLD, BRIGHT_RED))
    blank = gutter(" " * width + " |")

    def row(number: int, prefix: str, text: str) -> str:
        return f"{gutter(f'{number:>{width}} |')} {prefix}{text}".rstrip()

    rows, marks = [blank], 0  # marks: how many rows there were when the last row of marks was added
    start = _Line.of(lines[first - 1])
    if first == last:
        end_col = f.end_col if f.end_line in (0, f.line) and f.end_col else f.col
        begin = start.at(f.col)
        carets = max(start.at(end_col) - begin, 1)
        for number in range(top, bottom + 1):
            rows.append(row(number, "", _Line.of(lines[number - 1]).text))
            if number == first:
                rows.append(f"{blank} {' ' * begin}{mark('^' * carets)}")
                marks = len(rows)
        return width, rows if marks == len(rows) else [*rows, blank]
    # a span over lines: every row gets two columns for the `|` that runs down its left
    opening = not lines[first - 1][: max(f.col - 1, 0)].strip()  # the span starts the line's text: `/`
    end = _Line.of(lines[last - 1])
    last_char = end.at(f.end_col - 1) if f.end_col > 1 else 0
    half = FOLD // 2
    hidden = range(first + half, last - half + 1) if last - first + 1 > FOLD else range(0)
    for number in range(top, bottom + 1):
        text = _Line.of(lines[number - 1]).text
        if number < first or number > last:
            rows.append(row(number, "  ", text))
        elif number == first:
            rows.append(row(number, mark("/ ") if opening else "  ", text))
            if not opening:
                rows.append(f"{blank} {mark(' ' + '_' * (start.at(f.col) + 1) + '^')}")
                marks = len(rows)
        elif number in hidden:
            if number == hidden.start:
                rows.append(gutter("..."))
        else:
            rows.append(row(number, mark("| "), text))
        if number == last:
            rows.append(f"{blank} {mark('|' + '_' * (last_char + 1) + '^')}")
            marks = len(rows)
    return width, rows if marks == len(rows) else [*rows, blank]
