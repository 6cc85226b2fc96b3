"""TOML reading with one-line errors (tomllib on 3.11+, its tomli backport on 3.10)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

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


def load_toml(path: Path, *, what: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: {what} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read {what}: {exc}") from None
    return parse_toml(text, origin=str(path), what=what)
