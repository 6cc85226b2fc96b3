"""Reading a file as Python source, with every way it can fail turned into a SourceError."""

from __future__ import annotations

import ast
import io
import re
import sys
import time
import tokenize
import unicodedata
import warnings
from pathlib import Path

from specguard._files import SOURCE_CAP, UnreadableFile, read_regular_stat
from specguard.errors import SourceError

# A stamp taken this soon after the file's last change could also be the stamp of a later change of the same size
# (mtimes are coarse: a tick of the kernel's clock, two seconds on FAT). Such a file's scan is used but not kept,
# as git treats its "racily clean" entries, so the cache never serves the scan of bytes the file no longer holds.
_RACY_NS = 2_000_000_000
UNSTAMPED = (0, 0)  # a scan with this stamp is never stored nor matched


def read_stamped(path: Path | str) -> tuple[bytes, tuple[int, int]]:
    """The file's bytes and its (size, mtime_ns) stamp (UNSTAMPED when racy), from one open of a regular file."""
    try:
        data, st = read_regular_stat(path, SOURCE_CAP)
    except UnreadableFile as exc:
        raise SourceError(exc.reason) from None
    if time.time_ns() - st.st_mtime_ns < _RACY_NS:
        return data, UNSTAMPED
    return data, (st.st_size, st.st_mtime_ns)


def decode(data: bytes) -> str:
    """Source text, honouring a PEP 263 coding cookie; UTF-8 otherwise."""
    if b"\x00" in data:
        raise SourceError("file contains NUL bytes; not Python source")
    head = data[:400]
    if b"coding" not in head and not head.startswith(b"\xef\xbb\xbf"):
        try:  # the common case, ten times faster than tokenize's detection
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SourceError(f"cannot decode file as Python source (not UTF-8?): {exc.reason}") from None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as exc:
        reason = exc.reason if isinstance(exc, UnicodeDecodeError) else exc
        raise SourceError(f"cannot decode file as Python source (not UTF-8?): {reason}") from None


def names_as_python_reads(text: str) -> str:
    """`text` in which to look for a name by reading, as Python compares identifiers: NFKC-normalised (PEP 3131),
    so a name spelled in fullwidth or other compatibility letters is found as the very name `ast` gives. `text`
    itself for the usual file, which normalisation leaves unchanged."""
    if text.isascii() or unicodedata.is_normalized("NFKC", text):
        return text
    return unicodedata.normalize("NFKC", text)


def name_bytes(text: str, data: bytes) -> bytes:
    """`names_as_python_reads` as bytes: `data` itself (no copy) where it changes nothing."""
    names = names_as_python_reads(text)
    return data if names is text else names.encode("utf-8", "surrogateescape")


# What one file may cost: its parse, its summary, libcst and the rules on it, and the evaluator's reading of it all
# grow with its tokens, counted here before any of them runs. Measured on this project's 2-core machine, the shape
# that costs most a token (speculators that each override a shared helper: libcst parses all of it and two rules
# report and fix every class) takes about 2 KB and 40 µs a token, the others less (a long list literal: 1 KB a
# token at `ast.parse`'s peak, which alone took 7.8 GB for a 15.6 MB literal). 250,000 tokens keep any file under
# ~600 MB and ~10 s, and are 4.5 times the largest file of vLLM 0.22-0.33 (v1/worker/gpu_model_runner.py of 0.28.0,
# about 55,500) and 5 times SGLang 0.5.23's (about 49,900).
MAX_TOKENS = 250_000


class TooLarge(SourceError):
    """A file over the per-file budget: not judged (a note, not a finding), so it cannot cost the machine."""


# Each byte's class for `approximate_tokens`: "a" a byte of a name or number, "." one that makes a token of its own
# (an operator, a bracket, a quote, a comment sign, a line break), " " the others (blanks).
_OWN_TOKEN = b"()[]{},:.;@=+-*/%&|^~<>!'\"#\\\r\n"
_CLASSES = bytes(
    ord("a") if chr(b).isalnum() or b == ord("_") or b >= 0x80 else ord(".") if b in _OWN_TOKEN else ord(" ")
    for b in range(256)
)


def approximate_tokens(text: str) -> int:
    """About how many tokens `text` holds, from above: every start of a name or number and every operator, bracket,
    quote, comment sign and line break counts one (in strings and comments too). Two passes in C over the bytes."""
    marks = text.encode("utf-8", "surrogatepass").translate(_CLASSES)
    return marks.count(b".") + marks.count(b" a") + marks.count(b".a") + marks.startswith(b"a")


def within_budget(text: str) -> None:
    """Raises TooLarge for a file over the per-file budget (a file of fewer characters than it never is)."""
    if len(text) > MAX_TOKENS and (tokens := approximate_tokens(text)) > MAX_TOKENS:
        raise TooLarge(f"too large for the budget (about {tokens:,} tokens; a file may have {MAX_TOKENS:,})")


# Module trees parsed from the same text in this process, most recent last: several source trees that hold one
# file alike (a fork's copy of a release, the config pre-flight run case after case) parse it once. A tree is
# shared only where nothing changes it: what the program view and the evaluator keep on its nodes is computed
# from the nodes alone.
_SHARED: dict[str, ast.Module] = {}
_SHARED_TREES = 256


def parse_shared(text: str, filename: str) -> ast.Module:
    """`parse_ast`, the tree shared with every earlier parse of the same text in this process (a few hundred
    kept); for the read-only views of source trees, never for a tree anything edits."""
    found = _SHARED.pop(text, None)
    if found is None:
        found = parse_ast(text, filename)
        if len(_SHARED) >= _SHARED_TREES:
            del _SHARED[next(iter(_SHARED))]
    _SHARED[text] = found
    return found


def parse_ast(text: str, filename: str) -> ast.Module:
    """CPython's own parser: fast, and it refuses pathological nesting with an error instead of a crash. A file over
    the per-file budget is TooLarge, before the parser runs."""
    within_budget(text)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like are not our findings
            return ast.parse(text, filename=filename)
    except SyntaxError as exc:
        newer = _newer_syntax(exc.text or "", exc.msg)
        raise SourceError(f"syntax error: {exc.msg}{newer}", exc.lineno or 1) from None
    except (RecursionError, MemoryError, ValueError) as exc:
        raise SourceError(f"cannot parse: {type(exc).__name__}: expression nesting too deep") from None


# Syntax that a newer Python accepts and the one running specguard rejects: (first version, what, pattern on the
# line the parser stopped at, or on its message for the f-string rules PEP 701 lifted).
_NEWER_SYNTAX = [
    ((3, 11), "`except*`, PEP 654", re.compile(r"^\s*except\s*\*"), None),
    ((3, 12), "a `type` alias statement, PEP 695", re.compile(r"^\s*type\s+[A-Za-z_]\w*\s*[\[=]"), None),
    ((3, 12), "type parameters, PEP 695", re.compile(r"^\s*(async\s+)?(def|class)\s+[A-Za-z_]\w*\s*\["), None),
    ((3, 12), "an f-string that PEP 701 allows", None, re.compile(r"^f-string expression part cannot include")),
]


def _newer_syntax(line: str, message: str) -> str:
    """Why a syntax error may be a Python version mismatch, naming both versions; "" when it is not one."""
    for version, what, on_line, on_message in _NEWER_SYNTAX:
        if sys.version_info >= version:
            continue
        if (on_line is not None and on_line.match(line)) or (on_message is not None and on_message.match(message)):
            needed, running = ".".join(map(str, version)), ".".join(map(str, sys.version_info[:3]))
            return (
                f" (the file needs Python {needed} or newer ({what}) but specguard runs on Python {running}); "
                f"run specguard with Python {needed}+ (pre-commit: `language_version: python{needed}`)"
            )
    return ""
