"""TOML reading with one-line errors (tomllib on 3.11+, its tomli backport on 3.10)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from specguard._files import UnreadableFile, read_regular_text
from specguard.errors import UserError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


def parse_toml(text: str, *, origin: str, what: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{origin}: {what} is not valid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise UserError(f"{origin}: {what} is not valid TOML: nested too deeply") from None


def load_toml(path: Path, *, what: str) -> dict[str, Any]:
    """A TOML file read as every data file is (a regular file, size-capped: never a FIFO or /dev/zero)."""
    try:
        text = read_regular_text(path)
    except UnreadableFile as exc:
        if not os.path.lexists(path):
            raise UserError(f"{path}: {what} not found") from None
        raise UserError(f"{path}: cannot read {what}: {exc.reason}") from None
    return parse_toml(text, origin=str(path), what=what)
