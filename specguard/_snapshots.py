"""Validated configuration, kept until the text it came from changes.

Packs and settings are validated by pydantic, but importing pydantic costs about as much as a whole warm
`specguard check`. The validated objects are plain dataclasses, so they are stored here as data (msgpack decoded back
into the same dataclasses with every field type-checked, see _datafile.py), keyed by everything that could change the
result (the texts, and the code of the schema itself), and reused without importing pydantic.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from specguard import __version__, _datafile

T = TypeVar("T")

_SCHEMA_FILES = [Path(__file__).with_name(n) for n in ("packs.py", "settings.py", "_snapshots.py", "_datafile.py")]


def user_cache_home() -> Path:
    """specguard's folder in the user's cache ($XDG_CACHE_HOME or ~/.cache)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specguard"


def validated(kind: str, material: list[bytes], result_type: type[T], build: Callable[[], T]) -> T:
    """build() once per distinct material; later calls with the same material decode its stored result."""
    digest = hashlib.sha256(__version__.encode())
    for part in [*(p.read_bytes() for p in _SCHEMA_FILES), *material]:
        digest.update(len(part).to_bytes(8, "little") + part)
    path = user_cache_home() / "validated" / f"{kind}-{digest.hexdigest()[:32]}.msgpack"
    stored = _datafile.read(path, kind, result_type)
    if stored is not None:
        return stored  # type: ignore[no-any-return]
    value = build()  # raises UserError for bad input; nothing is stored then
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _datafile.write(path, kind, value)
    except OSError:
        pass  # an unwritable cache only means validating again next time
    return value
