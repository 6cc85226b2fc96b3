"""Writing a report to stdout, where the reader may leave early (`specguard explain SG103 | head`)."""

from __future__ import annotations

import os
import sys


def emit(text: str) -> None:
    """Print to stdout; a reader that went away is not an error worth a traceback, and the exit code stays."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not raise again
