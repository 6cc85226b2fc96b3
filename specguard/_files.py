"""Reading files that may be hostile, and writing files without losing what was there.

Every file specguard reads from disk (sources, rule packs, settings, baselines, caches, serving configs, the served
vLLM tree) goes through `read_regular`. A FIFO would block a plain `open`, a link to `/dev/zero` would fill memory
and a huge file would cost minutes; each becomes an `UnreadableFile` with a reason a user can act on.

Every file specguard writes goes through one of two writers: `replace_atomically` for files that are specguard's
own (caches, baselines: a temp file renamed over the old one, so a failure part-way leaves the old file whole), and
`rewrite_in_place` for the user's sources that `--fix` changes (the same inode, as editors write a file with other
names, so hard links, mode, owner and extended attributes stay; compared and written under one open file).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
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


class UnwritableFile(OSError):
    """A file specguard did not write, and left as it was; `reason` is the short human part of the message."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def read_regular(path: Path | str, cap: int) -> bytes:
    """The bytes of a regular file of at most `cap` bytes, from one open. Raises `UnreadableFile`."""
    return read_regular_stat(path, cap)[0]


def read_regular_stat(
    path: Path | str, cap: int, *, follow: bool = True, dir_fd: int | None = None
) -> tuple[bytes, os.stat_result]:
    """`read_regular`, with the file's status as it was when opened (`follow=False`: a symlink is refused; `dir_fd`:
    `path` is relative to that open folder, as `os.open` takes it)."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _CLOEXEC | (0 if follow else _NOFOLLOW), dir_fd=dir_fd)
    except OSError as exc:
        raise UnreadableFile(path, f"cannot read file: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        _require_regular(path, st, UnreadableFile, "reads")
        if st.st_size > cap:
            raise UnreadableFile(path, f"file too large ({st.st_size} bytes; the limit is {cap})")
        return _read_all(path, fd, cap, st.st_size), st
    except UnreadableFile:
        raise
    except OSError as exc:
        raise UnreadableFile(path, f"cannot read file: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _require_regular(path: Path | str, st: os.stat_result, error: type[OSError], verb: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
        raise error(path, f"not a regular file ({kind}); specguard {verb} regular files only")


def _read_all(path: Path | str, fd: int, cap: int, expected: int) -> bytes:
    """Up to the end of the file, not to the size it had: it may grow, and then the cap still holds. The first read
    asks for the size expected (one allocation of that size: a fixed large buffer per file cost a cold run a third
    of its time), the next ones confirm the end."""
    chunks: list[bytes] = []
    size, request = 0, min(expected, cap) + 1
    while True:
        chunk = os.read(fd, request)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > cap:
            raise UnreadableFile(path, f"file too large (more than {cap} bytes)")
        request = min(1 << 16, cap + 1 - size)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_regular_text(path: Path | str, cap: int = DATA_CAP) -> str:
    """A regular file decoded as UTF-8. Raises `UnreadableFile` (including for bytes that are not UTF-8)."""
    data = read_regular(path, cap)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def replace_atomically(path: Path | str, data: bytes, mode: int | None = None) -> None:
    """Put `data` at `path` through a temp file in the same folder renamed over it: a reader sees the old file or
    the new one, and a failure part-way (a full disk, a file size limit, an interrupt) leaves the old one whole.

    The name itself is replaced, never followed (a caller that means a link's target passes the target). The file
    keeps the mode of the one it replaces; a new file gets `mode`, else what the umask gives `open`. Raises OSError.
    """
    path = Path(path)
    if mode is None:
        try:
            st = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        mode = stat.S_IMODE(st.st_mode) if st is not None and stat.S_ISREG(st.st_mode) else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


def rewrite_in_place(path: Path | str, expected: bytes, data: bytes) -> None:
    """Make the regular file at `path` hold `data` instead of `expected`, in place, as editors save a file that has
    other names: every hard link sees the change, and mode, owner, ACLs and extended attributes stay.

    Refused, with the file untouched, when it is not a regular file, is a symlink (the caller resolves links and
    decides whether their target may be written), is read-only, or no longer holds `expected`; the comparison and
    the write happen under one open file. A write that fails part-way (a full disk, a file size limit, an
    interrupt) puts `expected` back. Afterwards the name is checked to still be this file holding `data`: when
    another program replaced or wrote it meanwhile, that is reported as a conflict. Raises `UnwritableFile`.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | _CLOEXEC | _NOFOLLOW)
    except OSError as exc:
        raise UnwritableFile(path, _open_failure(path, exc)) from None
    try:
        st = os.fstat(fd)
        _require_regular(path, st, UnwritableFile, "writes")
        if not st.st_mode & 0o222:  # root may write anyway; a read-only file says its owner does not want that
            raise UnwritableFile(path, _read_only(st))
        try:
            current = _read_all(path, fd, len(expected), st.st_size)
        except UnreadableFile:
            current = None
        if current != expected:
            raise UnwritableFile(path, "it changed while specguard was fixing it; left as it is")
        _write_over(path, fd, expected, data)
        _confirm(path, fd, st, data)
    except UnwritableFile:
        raise
    except OSError as exc:
        raise UnwritableFile(path, f"cannot write it: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _open_failure(path: Path | str, exc: OSError) -> str:
    with contextlib.suppress(OSError):
        st = os.stat(path, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            return "it is a symlink; specguard writes regular files only"
        if not stat.S_ISREG(st.st_mode):
            return f"not a regular file ({_KINDS.get(stat.S_IFMT(st.st_mode), 'not a regular file')})"
        if not st.st_mode & 0o222:
            return _read_only(st)
    return f"cannot write it: {exc.strerror or exc}"


def _read_only(st: os.stat_result) -> str:
    return f"it is read-only (mode {stat.S_IMODE(st.st_mode):04o}); make it writable to have it fixed"


def _write_over(path: Path | str, fd: int, old: bytes, new: bytes) -> None:
    """Replace `old` (the file's content) by `new`. What may fail for lack of room (the part past the old end) is
    written first, so the old content is still whole when it fails; any later failure writes `old` back."""
    try:
        if len(new) > len(old):
            _pwrite_all(fd, new[len(old) :], len(old))
        _pwrite_all(fd, new[: len(old)], 0)
        os.ftruncate(fd, len(new))
    except BaseException as exc:
        restored = False
        with contextlib.suppress(OSError):
            os.ftruncate(fd, len(old))
            _pwrite_all(fd, old, 0)
            restored = True
        if isinstance(exc, OSError):
            kept = "left as it was" if restored else "and its old content could not be put back: check it"
            raise UnwritableFile(path, f"cannot write it: {exc.strerror or exc}; {kept}") from None
        raise


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _confirm(path: Path | str, fd: int, st: os.stat_result, data: bytes) -> None:
    """The check after writing: still the same file under the name, holding what was written."""
    try:
        now = os.stat(path, follow_symlinks=False)
    except OSError:
        now = None
    if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        raise UnwritableFile(
            path, "conflict: another program replaced it while specguard wrote the fix; its version is kept"
        )
    if os.pread(fd, len(data) + 1, 0) != data:
        raise UnwritableFile(path, "conflict: another program wrote to it while specguard did; check the file")
