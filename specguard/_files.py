"""Reading files that may be hostile: only regular files, never blocking, never more than a cap.

Every file specguard reads from disk (sources, rule packs, settings, baselines, caches, serving configs, the served
vLLM tree) goes through `read_regular`. A FIFO would block a plain `open`, a link to `/dev/zero` would fill memory
and a huge file would cost minutes; each becomes an `UnreadableFile` with a reason a user can act on.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

# Caps by kind of file, far above anything real (vLLM's largest module is under 1 MiB) and far below harm.
SOURCE_CAP = 16 * 1024 * 1024
DATA_CAP = 16 * 1024 * 1024  # packs, settings, baselines, serving configs
CACHE_CAP = 256 * 1024 * 1024  # the repository cache of a large tree

_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


class UnreadableFile(OSError):
    """A file specguard will not or cannot read; `reason` is the short human part of the message."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


def read_regular(path: Path | str, cap: int) -> bytes:
    """The bytes of a regular file of at most `cap` bytes, from one open. Raises `UnreadableFile`."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UnreadableFile(path, f"cannot read file: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
            raise UnreadableFile(path, f"not a regular file ({kind}); specguard reads regular files only")
        if st.st_size > cap:
            raise UnreadableFile(path, f"file too large ({st.st_size} bytes; the limit is {cap})")
        chunks: list[bytes] = []
        size = 0
        while True:  # read to the end, not to st_size: the file may grow, and then the cap still holds
            chunk = os.read(fd, min(1 << 20, cap + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:
                raise UnreadableFile(path, f"file too large (more than {cap} bytes)")
        return b"".join(chunks)
    except UnreadableFile:
        raise
    except OSError as exc:
        raise UnreadableFile(path, f"cannot read file: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_regular_text(path: Path | str, cap: int = DATA_CAP) -> str:
    """A regular file decoded as UTF-8. Raises `UnreadableFile` (including for bytes that are not UTF-8)."""
    data = read_regular(path, cap)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
