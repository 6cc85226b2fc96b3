"""Validated configuration, kept until the text it came from changes; and the per-user cache that holds it.

Packs and settings are validated by pydantic, but importing pydantic costs about as much as a whole warm
`specguard check`. The validated objects are plain dataclasses, so they are stored here as data (msgpack decoded back
into the same dataclasses with every field type-checked, see _datafile.py), keyed by everything that could change the
result (the texts, and the code of the schema itself), and reused without importing pydantic.

The key is no secret, so the per-user cache (`~/.cache/specguard`, or under $XDG_CACHE_HOME) is used only while it is
the user's alone: the folder, its subfolders and each file read belong to the user running specguard and are writable
by nobody else (checked on the open folders and files themselves, so the check and the read are of the same objects).
Otherwise another local user could have put a snapshot there that, say, ignores a rule: the run says so once and goes
without it, writing nothing there.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from specguard import __version__, _datafile
from specguard._files import CACHE_CAP, FOLDER, UnreadableFile, open_folder, read_regular_stat
from specguard.ownership import untrusted

T = TypeVar("T")

_SCHEMA_FILES = [Path(__file__).with_name(n) for n in ("packs.py", "settings.py", "_snapshots.py", "_datafile.py")]
_NOTES: list[str] = []  # why the per-user cache was not used, each said once per run


def user_cache_home() -> Path:
    """specguard's folder in the user's cache ($XDG_CACHE_HOME or ~/.cache)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specguard"


def user_cache_notes() -> list[str]:
    """What the run says once about the per-user cache it did not use."""
    return list(_NOTES)


def _distrust(shown: Path, why: str) -> None:
    note = (
        f"the user cache {user_cache_home()} was not used: {shown}: {why}; another user could have forged what it "
        "holds (make it yours and writable by you alone, or remove it): running without it"
    )
    if note not in _NOTES:
        _NOTES.append(note)


@contextlib.contextmanager
def user_cache_folder(*parts: str, create: bool) -> Iterator[int | None]:
    """The per-user cache folder, or its subfolder `parts`, held open while it is the user's alone; None where it is
    missing (and not to be made), cannot be made, or is not private (said once). The user's own path to it is
    followed; below it, no link."""
    held: list[int] = []
    try:
        yield _open_private(held, parts, create)
    finally:
        for fd in held:
            os.close(fd)


def _open_private(held: list[int], parts: tuple[str, ...], create: bool) -> int | None:
    home = shown = user_cache_home()
    try:
        held.append(_folder(lambda: open_folder(home), lambda: os.makedirs(home, 0o700), create))
        for part in parts:
            why = untrusted(os.fstat(held[-1]), system_ok=False)
            if why is not None:
                _distrust(shown, why)
                return None
            parent = held[-1]
            held.append(
                _folder(
                    lambda: os.open(part, FOLDER | os.O_NOFOLLOW, dir_fd=parent),  # noqa: B023 - called right here
                    lambda: os.mkdir(part, 0o700, dir_fd=parent),  # noqa: B023
                    create,
                )
            )
            shown = shown / part
    except OSError:
        return None  # missing, or cannot be made: no cache, nothing to say
    why = untrusted(os.fstat(held[-1]), system_ok=False)
    if why is not None:
        _distrust(shown, why)
        return None
    return held[-1]


def _folder(open_it: Callable[[], int], make_it: Callable[[], None], create: bool) -> int:
    try:
        return open_it()
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):
        make_it()
    return open_it()


def read_private(folder: int, name: str, shown: Path, kind: str, payload_type: Any) -> tuple[Any | None, bool]:
    """A data file of the per-user cache (None when missing or unreadable), and whether it may be trusted (a file
    that is not the user's alone is not read, and said once)."""
    try:
        data, st = read_regular_stat(name, CACHE_CAP, follow=False, dir_fd=folder)
    except UnreadableFile:
        return None, True
    why = untrusted(st, system_ok=False)
    if why is not None:
        _distrust(shown, why)
        return None, False
    return _datafile.decode(data, kind, payload_type), True


def validated(kind: str, material: list[bytes], result_type: type[T], build: Callable[[], T]) -> T:
    """build() once per distinct material; later calls with the same material decode its stored result."""
    digest = hashlib.sha256(__version__.encode())
    for part in [*(p.read_bytes() for p in _SCHEMA_FILES), *material]:
        digest.update(len(part).to_bytes(8, "little") + part)
    name = f"{kind}-{digest.hexdigest()[:32]}.msgpack"
    trusted = True
    with user_cache_folder("validated", create=False) as folder:
        if folder is not None:
            stored, trusted = read_private(folder, name, user_cache_home() / "validated" / name, kind, result_type)
            if stored is not None:
                return stored  # type: ignore[no-any-return]
    value = build()  # raises UserError for bad input; nothing is stored then
    if trusted:
        with user_cache_folder("validated", create=True) as folder, contextlib.suppress(OSError):
            if folder is not None:
                _datafile.write(name, kind, value, dir_fd=folder)
    return value
