"""Files specguard writes and reads back (its caches): msgpack, decoded into the project's own types.

Nothing read from disk can run code. A file holds a header (what it is, the specguard version that wrote it) and a
payload; decoding builds only the dataclasses the caller names and checks every field's type on the way. A file that
is missing, undecodable, of another shape, kind or version reads as None and the caller recomputes: a damaged or
foreign cache costs time, never code execution.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import msgspec

from specguard import __version__
from specguard._files import CACHE_CAP, UnreadableFile, read_regular, replace_atomically

T = TypeVar("T")


class _Envelope(msgspec.Struct, array_like=True):
    kind: str
    version: str
    payload: msgspec.Raw  # decoded only once the header matches


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    raise NotImplementedError(f"specguard cannot store a {type(obj).__name__} in a data file")


def _dec_hook(kind: type, obj: Any) -> Any:
    if kind is Path and isinstance(obj, str):
        return Path(obj)
    raise NotImplementedError(f"expected {kind}, got {type(obj).__name__}")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_ENVELOPE = msgspec.msgpack.Decoder(_Envelope)
_DECODERS: dict[Any, msgspec.msgpack.Decoder] = {}


def encode(kind: str, payload: Any) -> bytes:
    return _ENCODER.encode(_Envelope(kind, __version__, msgspec.Raw(_ENCODER.encode(payload))))


def decode(data: bytes, kind: str, payload_type: Any) -> Any | None:
    """The payload as `payload_type`, or None for anything but a well-formed file of this kind and version."""
    decoder = _DECODERS.get(payload_type)
    if decoder is None:
        decoder = _DECODERS[payload_type] = msgspec.msgpack.Decoder(payload_type, dec_hook=_dec_hook)
    try:
        envelope = _ENVELOPE.decode(data)
        if envelope.kind != kind or envelope.version != __version__:
            return None
        return decoder.decode(envelope.payload)
    except Exception:  # noqa: BLE001 - whatever a hostile or damaged file holds, it only means a cold run
        return None


def read(path: Path, kind: str, payload_type: Any) -> Any | None:
    """None also for a file that is not a regular one (a FIFO, a link to /dev/zero) or is over the cache cap."""
    try:
        data = read_regular(path, CACHE_CAP)
    except UnreadableFile:
        return None
    return decode(data, kind, payload_type)


def write(path: Path | str, kind: str, payload: Any, *, dir_fd: int | None = None) -> None:
    """Replace `path` atomically, private to the user (mode 0600), so a reader never sees half a file; a link or
    FIFO planted at `path` is replaced, not followed. `dir_fd`: `path` is a name in that open folder. Raises
    OSError."""
    replace_atomically(path, encode(kind, payload), mode=0o600, dir_fd=dir_fd)
