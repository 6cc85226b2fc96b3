"""Files specguard writes and reads back (its caches): msgpack, decoded into the project's own types.

Nothing read from disk can run code. A file holds a header (what it is, the specguard version that wrote it) and a
payload; decoding builds only the dataclasses the caller names and checks every field's type on the way. A file that
is missing, undecodable, of another shape, kind or version reads as None and the caller recomputes: a damaged or
foreign cache costs time, never code execution.
"""

from __future__ import annotations

import re
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
    escaped: bool = False  # every string of the payload went through `_escape` (it held a name's raw byte)


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


# A file name that is not UTF-8 reaches Python with each such byte as a lone surrogate (U+DC80-U+DCFF), which
# msgpack's UTF-8 strings cannot hold. Such a payload is stored with every string escaped, reversibly and still as
# valid UTF-8: NUL is the escape character, a surrogate becomes NUL + its byte as a character, NUL becomes NUL NUL.
_TO_ESCAPE = re.compile("[\x00\udc80-\udcff]")
_ESCAPED = re.compile("\x00(.)", re.DOTALL)


def _escape(text: str) -> str:
    return _TO_ESCAPE.sub(lambda m: "\x00" + (chr(ord(m[0]) - 0xDC00) if m[0] != "\x00" else "\x00"), text)


def _unescape(text: str) -> str:
    return _ESCAPED.sub(lambda m: chr(ord(m[1]) + 0xDC00) if m[1] != "\x00" else "\x00", text)


def _each_string(obj: Any, change: Any) -> Any:
    """`obj` (plain data: dicts, lists, tuples, scalars) with `change` applied to each string, keys included."""
    if isinstance(obj, str):
        return change(obj)
    if isinstance(obj, dict):
        return {_each_string(k, change): _each_string(v, change) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_each_string(item, change) for item in obj]
    return obj


def encode(kind: str, payload: Any) -> bytes:
    """Raises ValueError for a payload that cannot be stored (a caller's cache then goes unsaved, with a note)."""
    try:
        return _ENCODER.encode(_Envelope(kind, __version__, msgspec.Raw(_ENCODER.encode(payload))))
    except UnicodeEncodeError:  # a name's raw byte (a lone surrogate): stored escaped, read back exactly
        plain = msgspec.to_builtins(payload, builtin_types=(bytes,), enc_hook=_enc_hook)
        escaped = _ENCODER.encode(_each_string(plain, _escape))
        return _ENCODER.encode(_Envelope(kind, __version__, msgspec.Raw(escaped), escaped=True))


def decode(data: bytes, kind: str, payload_type: Any) -> Any | None:
    """The payload as `payload_type`, or None for anything but a well-formed file of this kind and version."""
    decoder = _DECODERS.get(payload_type)
    if decoder is None:
        decoder = _DECODERS[payload_type] = msgspec.msgpack.Decoder(payload_type, dec_hook=_dec_hook)
    try:
        envelope = _ENVELOPE.decode(data)
        if envelope.kind != kind or envelope.version != __version__:
            return None
        if envelope.escaped:
            plain = _each_string(msgspec.msgpack.decode(envelope.payload), _unescape)
            return msgspec.convert(plain, payload_type, dec_hook=_dec_hook)
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
