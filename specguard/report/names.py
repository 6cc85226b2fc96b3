"""How each output writes a file name, whatever bytes it holds.

Python gives a name that is not UTF-8 with each such byte as a lone surrogate (U+DC80-U+DCFF, "surrogateescape"),
which no UTF-8 writer accepts; a name may also hold a newline, a tab or a terminal escape. So a terminal line
escapes them, a text format that must be valid Unicode writes the bytes as `\\xNN`, and a URI percent-encodes the
name's bytes. JSON needs nothing: its `\\udcNN` escapes give the bytes back (os.fsencode of the decoded name).
"""

from __future__ import annotations

import os
from urllib.parse import quote

_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte of the name that is not UTF-8
        return f"\\x{code - 0xDC00:02x}"
    if char in _SHORT:
        return _SHORT[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def shown(text: str) -> str:
    """`text` as a terminal line shows it: what is not printable (a control character such as a newline or ESC, a
    byte that is not UTF-8, a bidirectional override, a line separator) written as Python escapes it, so a finding
    or a note stays one line that cannot drive the terminal."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escaped(char) for char in text)


def decodable(text: str) -> str:
    """`text` with each byte that is not UTF-8 written as `\\xNN`: valid Unicode, the rest of it as it is."""
    if text.isprintable():
        return text
    return "".join(_escaped(char) if 0xDC80 <= ord(char) <= 0xDCFF else char for char in text)


def workflow_value(text: str) -> str:
    """`text` as a GitHub workflow command's value: `%`, CR and LF percent-encoded as the runner decodes them (so a
    name's newline cannot end the command and start another), a tab kept (it drives no terminal, and the annotation
    must name the file on disk), and every other character that is not printable (ESC, a byte that is not UTF-8, a
    bidirectional override) written as `shown` writes it, so the log stays plain."""
    encoded = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return "\t".join(shown(part) for part in encoded.split("\t"))


def uri_path(path: str) -> str:
    """A relative path as a URI reference: its bytes percent-encoded (all but unreserved characters and `/`), so
    it decodes back to the name on disk, bytes that are not UTF-8 included."""
    return quote(os.fsencode(path), safe="/")
