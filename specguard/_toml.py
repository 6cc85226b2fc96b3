"""TOML reading with one-line errors (tomllib on 3.11+, its tomli backport on 3.10)."""

from __future__ import annotations

import codecs
import os
import re
import sys
from pathlib import Path
from typing import Any

from specguard._files import DATA_CAP, UnreadableFile, read_regular_stat
from specguard._nesting import MAX_DEPTH, NESTED_TOO_DEEPLY, deeper_than
from specguard.errors import UserError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

# Runs of what can follow each other in a dotted key (`a . "b" .c`) and runs of what cannot, as one token each.
_BARE = re.compile(r"[A-Za-z0-9_-]+")
_SPACE = re.compile(r"[ \t]+")
_OTHER = re.compile(r"[^A-Za-z0-9_\-. \t\"'#]+")
_BASIC = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_LITERAL = re.compile(r"'[^'\n]*'")
# A multi-line basic string's body: up to its first unescaped `"""` (a match that cannot fail, so it never
# backtracks).
_ML_BASIC_BODY = re.compile(r'(?:[^"\\]|\\[\s\S]|"(?!""))*')


def dotted_key_longer_than(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether TOML `text` holds a dotted key (`[a.b.c]`, `a.b.c = 1`) of more than `limit` parts, strings and
    comments skipped; reading stops at the first string that does not end (tomllib refuses the text there).

    tomllib copies a table's whole key for each key under it (and builds a key part by part), so its cost grows
    with the square of a key's length: this is read before tomllib parses anything. Floats and times count as
    two parts, far under the limit."""
    if text.count(".") < limit:  # most files: no key can have more parts than there are dots
        return False
    parts = 0
    after_dot = False
    i, end = 0, len(text)
    while i < end:
        char = text[i]
        part = False
        if char == "." and parts and not after_dot:
            after_dot, i = True, i + 1
            continue
        if char in " \t":
            i = _SPACE.match(text, i).end()  # type: ignore[union-attr]
            continue
        if text.startswith('"""', i):
            i = _ML_BASIC_BODY.match(text, i + 3).end()  # type: ignore[union-attr]
            if not text.startswith('"""', i):
                break
            i = _after_quotes(text, i, '"')
        elif text.startswith("'''", i):
            close = text.find("'''", i + 3)
            if close < 0:
                break
            i = _after_quotes(text, close, "'")
        elif char in "\"'":
            match = (_BASIC if char == '"' else _LITERAL).match(text, i)
            if match is None:
                break
            i, part = match.end(), True
        elif char == "#":
            newline = text.find("\n", i)
            i = end if newline < 0 else newline
        elif (match := _BARE.match(text, i)) is not None:
            i, part = match.end(), True
        else:
            other = _OTHER.match(text, i)  # None only for a dot that continues no key
            i = other.end() if other is not None else i + 1
        parts = (parts + 1 if after_dot else 1) if part else 0
        if parts > limit:
            return True
        after_dot = False
    return False


def _after_quotes(text: str, at: int, quote: str) -> int:
    """Past a multi-line string's closing quotes: the first three close it, up to two more belong to it."""
    stop = at
    while stop < len(text) and text[stop] == quote and stop - at < 5:
        stop += 1
    return stop


def parse_toml(text: str, *, origin: str, what: str) -> dict[str, Any]:
    nested = f"{origin}: {what} is not valid TOML: {NESTED_TOO_DEEPLY}"
    if dotted_key_longer_than(text):
        raise UserError(nested)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{origin}: {what} is not valid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise UserError(nested) from None
    if deeper_than(data):  # short keys in nested tables and arrays: what reads the data may recurse
        raise UserError(nested)
    return data


# Longest first: a UTF-32 little-endian mark begins with the UTF-16 one.
_OTHER_ENCODINGS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


def toml_text(data: bytes, *, origin: str, what: str) -> str:
    """A TOML file's bytes as text, decoded strictly as UTF-8 (TOML's one encoding). A UTF-8 byte-order mark is
    dropped (editors on Windows write one); UTF-16 or UTF-32 text, and bytes that are not UTF-8, are refused in one
    line: reading them leniently would let a file whose settings cannot be seen pass for one without any."""
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    for mark, encoding in _OTHER_ENCODINGS:
        if data.startswith(mark):
            raise UserError(f"{origin}: {what} is {encoding} text; TOML files are UTF-8: save it as UTF-8")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{origin}: {what} is not UTF-8 text ({exc.reason} at byte {exc.start}); TOML files are UTF-8"
        ) from None


def read_toml_file(path: Path, *, what: str) -> tuple[dict[str, Any], os.stat_result]:
    """A TOML file read as every data file is (a regular file, size-capped: never a FIFO or /dev/zero), decoded by
    `toml_text`, with the file's status as it was when opened (for the caller's trust check)."""
    try:
        data, st = read_regular_stat(path, DATA_CAP)
    except UnreadableFile as exc:
        if not os.path.lexists(path):
            raise UserError(f"{path}: {what} not found") from None
        raise UserError(f"{path}: cannot read {what}: {exc.reason}") from None
    return parse_toml(toml_text(data, origin=str(path), what=what), origin=str(path), what=what), st


def load_toml(path: Path, *, what: str) -> dict[str, Any]:
    """`read_toml_file`'s data."""
    return read_toml_file(path, what=what)[0]
