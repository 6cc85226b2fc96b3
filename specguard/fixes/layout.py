"""Lines a fix writes, laid out as the project's formatter (ruff format, black) lays them out at its line length.

A fix writes a few shapes of code: a statement holding one bracketed expression, a string message, a call's
arguments, an expression put where another was. Each helper here tries the layouts ruff tries, in its order, and
keeps the first whose lines fit: all on one line; the bracket's content on a line of its own, one level deeper
(ruff's "right-hand split"); then the content split at its own delimiters, one part per line. So a fixed file
that was formatted stays formatted, and specguard needs no formatter to fix it.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass

_OPENERS, _CLOSERS = ("(", "[", "{"), (")", "]", "}")
_LEADS = re.compile(r"(|return|assert|[A-Za-z_][\w.]*(\[[\w.\"']*\])?\s*=)")  # what may precede a split value


@dataclass(frozen=True)
class Layout:
    """Where the lines go: the project's line length and one level of indentation as its code uses it."""

    width: int = 88
    unit: str = "    "

    def fits(self, *lines: str) -> bool:
        return all(len(line) <= self.width for line in lines)

    def bracket(self, indent: str, head: str, parts: list[str], tail: str, joiner: str = " ") -> list[str]:
        """`head` + parts + `tail`, where `head` ends with an opening bracket and `tail` starts with its closing
        one: on one line, else the parts on one line of their own, else one part per line."""
        inner = indent + self.unit
        for candidate in (
            [indent + head + joiner.join(parts) + tail],
            [indent + head, inner + joiner.join(parts), indent + tail],
        ):
            if self.fits(*candidate):
                return candidate
        return [indent + head, *(inner + p for p in parts), indent + tail]

    def message(self, indent: str, text: str, placeholders: bool) -> list[str]:
        """A string literal of `text` on one line at `indent`, or split at spaces into implicitly concatenated
        literals that each fit (ruff joins them back only when the whole fits). `placeholders`: an f-string,
        whose `{...}` fields are never split; only the parts holding one get the `f` prefix."""
        room = self.width - len(indent) - 3  # the quotes and a prefix
        if len(text) <= room or " " not in text:
            return [indent + _literal(text, placeholders)]
        parts, current = [], ""
        for word in _words(text):
            if current and len(current) + len(word) > room:
                parts.append(current)
                current = ""
            current += word
        parts.append(current)
        return [indent + _literal(p, placeholders) for p in parts]

    def statement_with_message(self, indent: str, head: str, text: str, placeholders: bool, tail: str) -> list[str]:
        """`assert <test>, "message"` (head `assert <test>, `, no tail) or `raise E("message")` (head
        `raise E(`, tail `)`): on one line, else the message in brackets on lines of its own."""
        flat = indent + head + _literal(text, placeholders) + tail
        if self.fits(flat):
            return [flat]
        opener, closer = ("(", ")") if not tail else ("", tail)
        inner = self.message(indent + self.unit, text, placeholders)
        return [indent + head + opener, *inner, indent + closer]

    def in_place(self, prefix: str, suffix: str, flat: str, head: str, parts: list[str], tail: str) -> str | None:
        """The text to put between `prefix` (what precedes the old expression on its first line, indentation
        included) and `suffix` (what follows it on its last line): `flat` if the line fits, else `head` + parts
        + `tail` split inside its brackets, indented from the line's start, where a formatter would split there
        (`splits_here`); None where it would split something else, or where a line still does not fit."""
        if self.fits(prefix + flat + suffix):
            return flat
        if not splits_here(prefix, suffix):
            return None
        indent = prefix[: len(prefix) - len(prefix.lstrip())]
        lines = self.bracket(indent, prefix[len(indent) :] + head, parts, tail + suffix)
        if not self.fits(*lines):
            return None  # a formatter would split deeper, or re-lay the whole statement
        lines[0], lines[-1] = lines[0][len(prefix) :], lines[-1][: len(lines[-1]) - len(suffix)]
        return "\n".join(lines)

    def call(self, indent: str, head: str, arguments: list[Argument], tail: str) -> list[str] | None:
        """A call as a formatter lays it out: all on one line, else the arguments together on a line of their
        own, else one per line with a trailing comma, each split inside its own brackets if it still does not
        fit. None when some line still does not fit: a formatter would then split deeper, or elsewhere."""
        flats = [a.flat for a in arguments]
        lines = self.bracket(indent, head, [", ".join(flats)], tail)
        if len(lines) < 3 or self.fits(*lines):
            return lines
        inner = indent + self.unit
        out = [indent + head]
        for argument in arguments:
            line = f"{inner}{argument.flat},"
            if self.fits(line) or argument.split is None:
                out.append(line)
                continue
            split_head, parts, split_tail = argument.split
            out += self.bracket(inner, split_head, parts, split_tail + ",")
        out.append(indent + tail)
        return out if self.fits(*out) else None  # a formatter would split deeper, or re-lay the statement


@dataclass(frozen=True)
class Argument:
    """A call's argument as one line of text, and how to split it inside its own brackets (None: it cannot be)."""

    flat: str
    split: tuple[str, list[str], str] | None = None


def splits_here(prefix: str, suffix: str) -> bool:
    """Whether a formatter splitting this line would split the brackets of what lies between `prefix` and
    `suffix`: nothing else on the line has brackets to split. Before it only indentation, `name=`,
    `name = ` (`a.b = `, `d["key"] = `), `return ` or `assert `; after it at most a comma and a comment (which
    stays at the line's end)."""
    after = suffix.split("#", 1)[0].strip()
    return after in ("", ",") and _LEADS.fullmatch(prefix.strip()) is not None


def flat(source: str) -> str | None:
    """An expression's source on one line, as a formatter joins it inside brackets; None when it cannot be
    joined without changing what it says or how a formatter treats it (a comment, a multi-line string, a
    backslash continuation, a trailing comma before a closing bracket, which formatters keep exploded)."""
    lines = source.split("\n")
    if '"""' in source or "'''" in source or "\\\n" in source:
        return None if len(lines) > 1 else source
    if has_comment(source) is not False:
        return None
    out = lines[0].rstrip()
    for line in lines[1:]:
        piece = line.strip()
        if not piece:
            continue
        if piece.startswith(_CLOSERS):
            if out.endswith(","):
                return None
            out += piece
        elif out.endswith(_OPENERS):
            out += piece
        else:
            out += " " + piece
    return out


def has_comment(source: str) -> bool | None:
    """Whether an expression's source holds a comment; None when it does not tokenize as one."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(f"({source})").readline))
    except (tokenize.TokenError, SyntaxError):
        return None
    return any(t.type == tokenize.COMMENT for t in tokens)


def _words(text: str) -> list[str]:
    """`text` cut after each space, never inside an f-string's `{...}` field."""
    words, current, depth = [], "", 0
    for char in text:
        current += char
        depth += {"{": 1, "}": -1}.get(char, 0)
        if char == " " and depth == 0:
            words.append(current)
            current = ""
    return [*words, current] if current else words


def _literal(text: str, placeholders: bool) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'{"f" if placeholders and "{" in text else ""}"{escaped}"'
