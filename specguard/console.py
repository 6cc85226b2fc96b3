"""Writing to the terminal: reports to stdout, where the reader may leave early (`specguard explain SG103 | head`),
and one-line notes, warnings and errors to stderr."""

from __future__ import annotations

import os
import sys

from specguard.report.names import shown


def emit(text: str) -> None:
    """Print to stdout; a reader that went away is not an error worth a traceback, and the exit code stays.

    What the terminal's encoding cannot hold (a name's `ü` on an ASCII terminal) is written as Python escapes it,
    never an error: the formats keep what they write valid Unicode, this is what is left."""
    if sys.stdout.errors == "strict" and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        print(text, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not raise again


def colour_wanted() -> bool:
    """Whether a report printed to stdout may be coloured, as ruff decides it: never with `NO_COLOR` set (non-empty),
    always with `FORCE_COLOR` set (non-empty; NO_COLOR wins over it, as ruff's), otherwise only on a terminal. A
    report written with `--output-file` never is (the caller's part)."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced by an object without one, or closed
        return False


def tell(line: str) -> None:
    """One line on stderr (`specguard: note: ...`): a file name or value in it that holds a newline, a terminal
    escape or bytes that are not UTF-8 is escaped (report/names.py), so it stays one line."""
    print(shown(line), file=sys.stderr)
