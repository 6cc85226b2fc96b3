"""Lines as CPython numbers them: only "\\r\\n", "\\r" and "\\n" end a line.

`str.splitlines` also ends lines at a form feed, U+2028, U+0085 and other separators, and counting "\\n" alone
misses a lone CR; either puts a position after such a character on another line than `ast` gives, so a finding or
a fix edit lands beside its code. Every position, fix edit and diff of source text is counted with this one model.
"""

from __future__ import annotations

import bisect
import functools
import re

NEWLINE = re.compile(r"\r\n?|\n")
NEWLINE_BYTES = re.compile(rb"\r\n?|\n")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def source_lines(text: str) -> list[str]:
    """The lines of `text`, each with its ending (the last one without, where the text ends without one)."""
    return _LINE.findall(text)


def line_starts(text: str) -> list[int]:
    """The offset in `text` at which each line starts (the first is 0)."""
    return [0, *(m.end() for m in NEWLINE.finditer(text))]


def newlines_in(text: str, start: int = 0, end: int | None = None) -> int:
    """How many line endings `text[start:end]` holds."""
    end = len(text) if end is None else end
    return text.count("\n", start, end) + text.count("\r", start, end) - text.count("\r\n", start, end)


def line_at(text: str, offset: int) -> int:
    """The 1-based line of `text` that holds `offset`; the text's line starts are found once for all the
    offsets asked of it (a file's fixes each ask one)."""
    return bisect.bisect_right(_line_starts(text), offset)


@functools.lru_cache(maxsize=4)
def _line_starts(text: str) -> tuple[int, ...]:
    return tuple(line_starts(text))


def position(text: str, offset: int, first_line: int = 1) -> tuple[int, int]:
    """The (line, 1-based column) of `offset` in `text`, whose first line is `first_line`."""
    ends = [m.end() for m in NEWLINE.finditer(text, 0, offset)]
    return first_line + len(ends), offset - (ends[-1] if ends else 0) + 1


def after_line_end(text: str, offset: int) -> bool:
    """Whether `offset` starts a line of `text`."""
    return offset == 0 or text[offset - 1] == "\n" or (text[offset - 1] == "\r" and text[offset : offset + 1] != "\n")


def comment_lines(text: str) -> dict[int, int]:
    """For each line that cannot end in a comment (its end lies inside a string, or it continues with a
    backslash), the line where a comment for it goes: the next line that ends a token stream's line (ruff's
    `noqa_row`). Lines not in the map take their comment themselves; text that does not tokenize maps nothing."""
    import io
    import tokenize

    try:
        tokens = tokenize.generate_tokens(io.StringIO(text).readline)
        ends = sorted({t.start[0] for t in tokens if t.type in (tokenize.NEWLINE, tokenize.NL)})
    except (tokenize.TokenError, SyntaxError):
        return {}
    moved, previous = {}, 0
    for end in ends:
        moved.update((line, end) for line in range(previous + 1, end))
        previous = end
    return moved
