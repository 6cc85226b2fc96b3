"""Reading files that may be hostile, and writing files without losing what was there.

Every file specguard reads from disk (sources, rule packs, settings, baselines, caches, serving configs, the served
vLLM tree) goes through `read_regular`. A FIFO would block a plain `open`, a link to `/dev/zero` would fill memory
and a huge file would cost minutes; each becomes an `UnreadableFile` with a reason a user can act on.

Every file specguard writes goes through one of two writers: `replace_atomically` for files that are specguard's
own (caches, baselines: a temp file renamed over the old one, so a failure part-way leaves the old file whole), and
`rewrite_in_place` for the user's sources that `--fix` changes (the same inode, as editors write a file with other
names, so hard links, mode, owner and extended attributes stay; compared and written under one open file, an
advisory lock and, where the OS grants one, a lease that holds other programs' opens back until it is written; a
lease that runs out first disarms the writer, so nothing of it lands after another program's write).

A file in a tree that someone else may change meanwhile (the sources `--fix` writes, the repository cache, a
baseline, what `specguard clean` removes) is opened with `open_beneath`: from a handle held on the tree's root, one
folder at a time, never letting the kernel follow a link, so that a folder swapped for a link between a check and
the open cannot send the write elsewhere. A link met on the way is read and followed by specguard itself, only
while it stays beneath the root (as Linux's `openat2(RESOLVE_BENEATH)`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import signal
import stat
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # not on Windows: no advisory lock, no lease
    fcntl = None  # type: ignore[assignment]

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


class OutsideTree(OSError):
    """A path that leads out of the folder it is opened beneath; `how` names the link (or `..`) that leads out, for
    the caller to finish the sentence ("... leads outside the paths checked")."""

    def __init__(self, how: str) -> None:
        super().__init__(errno.EXDEV, f"{how} leads outside")
        self.how = how


_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_PATH_ONLY = getattr(os, "O_PATH", os.O_RDONLY | os.O_NONBLOCK)  # where O_PATH is missing, a non-blocking open
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
FOLDER = os.O_RDONLY | _DIRECTORY | _CLOEXEC  # open_beneath's flags for a folder
_FOLDER_HERE = FOLDER | _NOFOLLOW  # one step of the walk: a folder, never through a link
MAX_LINKS = 40  # links followed in one path, as the kernel's own bound (MAXSYMLINKS)
# What opening a link with O_NOFOLLOW fails with: ELOOP (Linux, for a file), ENOTDIR (Linux, with O_DIRECTORY),
# EMLINK (FreeBSD); whether it was a link is then asked of readlink.
_LINK_ERRNOS = (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)


def open_beneath(root_fd: int, relative: str | os.PathLike[str], flags: int, mode: int = 0o666, **walk: bool) -> int:
    """`os.open(relative, flags, mode)` relative to the open folder `root_fd`, beneath it whatever is swapped
    meanwhile: each folder is opened from the one before with O_NOFOLLOW, a link met on the way (the last component
    too, unless `flags` has O_NOFOLLOW) is read and resolved here, and `..` or a link that leads above `root_fd`
    raises `OutsideTree`. Options as `locate_beneath`'s."""
    folder, _, fd = locate_beneath(root_fd, relative, flags, mode, **walk)
    os.close(folder)
    return fd


def locate_beneath(
    root_fd: int,
    relative: str | os.PathLike[str],
    flags: int | None = None,
    mode: int = 0o666,
    *,
    make_folders: bool = False,
    follow: bool = True,
) -> tuple[int, str, int]:
    """The walk of `open_beneath`: (the held folder the last component lies in, its name there, the file opened
    with `flags`, or -1 when `flags` is None: then a link at the last component is resolved too, and the name
    returned is what to create, replace or remove). The caller closes both descriptors.

    `make_folders`: create missing folders on the way (and the last one, when `flags` opens a folder), with the
    umask's mode. `follow=False`: any link on the way is an error (ELOOP), for a path already resolved, where a
    link can only be a swap."""
    path = os.fspath(relative)
    if os.path.isabs(path):
        raise ValueError(f"{path}: a path beneath a folder is relative")
    todo = path.split("/")[::-1]  # the next component last
    held = [os.dup(root_fd)]  # the folders from the root down to where the walk is
    walked: list[str] = []  # their names, for messages
    via, links = None, 0  # the last link followed, how many were
    try:
        while True:
            name = todo.pop() if todo else "."
            last = not todo
            if name in ("", "."):
                if not last:
                    continue
                name = "."
            elif name == "..":
                if len(held) == 1:
                    raise OutsideTree(via or f"'{path}'")
                os.close(held.pop())
                walked.pop()
                if not last:
                    continue
                name = "."
            if not last:
                try:
                    held.append(os.open(name, _FOLDER_HERE, dir_fd=held[-1]))
                    walked.append(name)
                    continue
                except FileNotFoundError:
                    if not make_folders:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, dir_fd=held[-1])
                    todo.append(name)  # opened, never followed, on the next turn
                    continue
                except OSError as exc:
                    target = _link_target(held[-1], name, exc)
            elif flags is None:
                found = _link_or_none(held[-1], name)
                if found is None:
                    return held.pop(), name, -1
                target = found
            else:
                try:
                    fd = os.open(name, flags | _NOFOLLOW | _CLOEXEC, mode, dir_fd=held[-1])
                except FileNotFoundError:
                    if not (make_folders and flags & _DIRECTORY):
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, dir_fd=held[-1])
                    todo.append(name)
                    continue
                except OSError as exc:
                    if flags & _NOFOLLOW or name == ".":
                        raise
                    target = _link_target(held[-1], name, exc)
                else:
                    return held.pop(), name, fd
            link = "/".join([*walked, name])
            links += 1
            if not follow or links > MAX_LINKS:
                raise OSError(errno.ELOOP, f"{link}: a link where none should be" if not follow else "too many links")
            via = f"the link {link} -> {target}"
            if os.path.isabs(target):
                inside = _inside_root(root_fd, target)
                if inside is None:
                    raise OutsideTree(via)
                for fd in held[1:]:
                    os.close(fd)
                del held[1:], walked[:]
                target = inside
            todo.extend(target.split("/")[::-1])
    finally:
        for fd in held:
            os.close(fd)


def _link_target(folder: int, name: str, failure: OSError) -> str:
    """What the link `name` holds; `failure` (the open's) again when it is not a link."""
    if failure.errno in _LINK_ERRNOS:
        found = _link_or_none(folder, name)
        if found is not None:
            return found
    raise failure


def _link_or_none(folder: int, name: str) -> str | None:
    try:
        return os.readlink(name, dir_fd=folder)
    except OSError:  # not a link (EINVAL), or not there
        return None


def _inside_root(root_fd: int, target: str) -> str | None:
    """An absolute link's target as a path beneath the root, when it names a place under the root's real path
    (Linux names an open folder in /proc); None for any other place, or where that cannot be known."""
    try:
        root = os.readlink(f"/proc/self/fd/{root_fd}")
    except OSError:
        return None
    target = os.path.normpath(target)
    if target == root:
        return "."
    prefix = root.rstrip("/") + "/"
    return target[len(prefix) :] if target.startswith(prefix) else None


def relative_inside(path: Path | str, root: Path | str) -> str | None:
    """`path` relative to `root` when it lies under it as written (absolute, `..` folded, no link resolved: the
    walk beneath the root decides where links lead); None for a path elsewhere, or the root itself."""
    top, where = os.path.abspath(root), os.path.abspath(path)
    return where[len(top.rstrip(os.sep)) + 1 :] if where.startswith(top.rstrip(os.sep) + os.sep) else None


# The folders a run named (the paths checked, the project's root), opened once at its start: absolute path, as
# named and as resolved then -> (the handle, the real path it had then).
_HELD: dict[str, tuple[int, str]] = {}


@contextlib.contextmanager
def holding(paths: Iterable[Path | str]) -> Iterator[None]:
    """Hold each folder of `paths` (a file's own folder) open for the run, from now: every later `open_folder` of
    it, or of a path beneath it, starts from that handle, so what the run writes lands in the folder it walked,
    whatever is swapped for its name (or for a `..` on the way to it) meanwhile. Released on leaving."""
    mine: list[str] = []
    try:
        for path in paths:
            mine.extend(hold_folder(path))
        yield
    finally:
        for key in mine:
            fd = _HELD.pop(key)[0]
            if not any(held[0] == fd for held in _HELD.values()):
                os.close(fd)


def hold_folder(path: Path | str) -> list[str]:
    """Hold the folder `path` names now (a file: its folder); the keys added (none when held already or not a
    folder one can open: the run then reports it as it would)."""
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    try:
        fd = os.open(folder, FOLDER)
    except OSError:
        return []
    real = os.path.realpath(folder)
    keys = [key for key in {os.path.abspath(folder), real} if key not in _HELD]
    if not keys:
        os.close(fd)
    for key in keys:
        _HELD[key] = (fd, real)
    return keys


def held_real_path(path: Path | str) -> tuple[str, bool]:
    """The real path a held folder had when the run started, and whether its name still leads to that folder
    (False: it was swapped meanwhile); any other path: its real path now, and True."""
    held = _HELD.get(os.path.abspath(path))
    if held is None:
        return os.path.realpath(path), True
    fd, real = held
    try:
        now, then = os.stat(path), os.fstat(fd)
    except OSError:
        return real, False
    return real, (now.st_dev, now.st_ino) == (then.st_dev, then.st_ino)


def open_folder(path: Path | str) -> int:
    """A folder the caller names (the user's own path: links followed), held open to work beneath it. A folder the
    run holds, or one beneath it, is opened from that handle (links beneath it followed only while they stay
    beneath it: `OutsideTree`)."""
    top = _held_above(path)
    if top is None:
        return os.open(path, FOLDER)
    rest = os.path.abspath(path)[len(top) :].lstrip(os.sep)
    return open_beneath(_HELD[top][0], rest or ".", FOLDER)


def is_held(path: Path | str) -> bool:
    """Whether `path` is, or lies beneath, a folder the run holds."""
    return _held_above(path) is not None


def _held_above(path: Path | str) -> str | None:
    where = os.path.abspath(path)
    tops = [key for key in _HELD if where == key or where.startswith(key.rstrip(os.sep) + os.sep)]
    return max(tops, key=len) if tops else None


def read_regular(path: Path | str, cap: int) -> bytes:
    """The bytes of a regular file of at most `cap` bytes, from one open. Raises `UnreadableFile`."""
    return read_regular_stat(path, cap)[0]


def read_regular_stat(
    path: Path | str, cap: int, *, follow: bool = True, dir_fd: int | None = None
) -> tuple[bytes, os.stat_result]:
    """`read_regular`, with the file's status as it was when opened (`follow=False`: a symlink is refused; `dir_fd`:
    `path` lies beneath that open folder, walked with `open_beneath`, and `OutsideTree` is raised as it is)."""
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
    flags = os.O_RDONLY | os.O_NONBLOCK | _CLOEXEC | (0 if follow else _NOFOLLOW)
    try:
        _refuse_unopened(path, flags, dir_fd)
        fd = os.open(path, flags) if dir_fd is None else open_beneath(dir_fd, path, flags)
    except (OutsideTree, UnreadableFile):
        raise
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


def _refuse_unopened(path: Path | str, flags: int, dir_fd: int | None) -> None:
    """Refuse what is not a regular file before opening it: opening a device acts on it (root opening
    /dev/watchdog arms it), so the check after the open (of whatever was swapped in meanwhile) is not enough alone.
    A name that does not exist is left to the open, which says so."""
    try:
        if dir_fd is None:
            st = os.stat(path, follow_symlinks=not flags & _NOFOLLOW)
        else:  # O_PATH opens the name without opening what it names
            probe = open_beneath(dir_fd, path, _PATH_ONLY | (flags & _NOFOLLOW))
            try:
                st = os.fstat(probe)
            finally:
                os.close(probe)
    except OutsideTree:
        raise
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode):
        return  # refused by the open's O_NOFOLLOW, with its own message
    _require_regular(path, st, UnreadableFile, "reads")


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


def replace_atomically(path: Path | str, data: bytes, mode: int | None = None, *, dir_fd: int | None = None) -> None:
    """Put `data` at `path` through a temp file in the same folder renamed over it: a reader sees the old file or
    the new one, and a failure part-way (a full disk, a file size limit, an interrupt) leaves the old one whole.

    `dir_fd`: `path` is a name in that open folder (held by the caller, so nothing swapped meanwhile moves the
    write); else the folder of `path` is opened as named. The name itself is replaced, never followed (a caller
    that means a link's target passes the target). The file keeps the mode of the one it replaces; a new file gets
    `mode`, else what the umask gives `open`. Raises OSError.
    """
    if dir_fd is None:
        folder = open_folder(Path(path).parent)
        try:
            return replace_atomically(Path(path).name, data, mode, dir_fd=folder)
        finally:
            os.close(folder)
    name = os.fspath(path)
    if mode is None:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        mode = stat.S_IMODE(st.st_mode) if st is not None and stat.S_ISREG(st.st_mode) else 0o666 & ~_umask()
    tmp, fd = _temp_file(name, dir_fd)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def _temp_file(name: str, dir_fd: int) -> tuple[str, int]:
    """A new file `.NAME.RANDOM.tmp` in the folder, private to the user, created here (never an existing name)."""
    while True:
        tmp = f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
            return tmp, os.open(tmp, flags, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            continue


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


def rewrite_in_place(path: Path | str, expected: bytes, data: bytes, *, root_fd: int | None = None) -> None:
    """Make the regular file at `path` hold `data` instead of `expected`, in place, as editors save a file that has
    other names: every hard link sees the change, and mode, owner, ACLs and extended attributes stay.

    `root_fd`: `path` lies beneath that open folder and is reached with `open_beneath` (`OutsideTree` is raised as
    it is); else its folder is opened as named. Refused, with the file untouched, when it is not a regular file, is
    a symlink (the caller resolves links and decides whether their target may be written), is read-only, or no
    longer holds `expected`; the comparison and the write happen under one open file. A write that fails part-way
    (a full disk, a file size limit, an interrupt) puts `expected` back. Afterwards the name is checked to still be
    this file holding `data`: when another program replaced or wrote it meanwhile, that is reported as a conflict.
    Raises `UnwritableFile`.
    """
    parent, name = os.path.split(os.fspath(path))
    try:
        folder = open_folder(parent or ".") if root_fd is None else open_beneath(root_fd, parent or ".", FOLDER)
    except OutsideTree:
        raise
    except OSError as exc:
        raise UnwritableFile(path, f"cannot write it: {exc.strerror or exc}") from None
    try:
        _rewrite(path, folder, name, expected, data)
    finally:
        os.close(folder)


def _rewrite(path: Path | str, folder: int, name: str, expected: bytes, data: bytes) -> None:
    try:
        fd = os.open(name, os.O_RDWR | os.O_NONBLOCK | _CLOEXEC | _NOFOLLOW, dir_fd=folder)
    except OSError as exc:
        raise UnwritableFile(path, _open_failure(folder, name, exc)) from None
    try:
        st = os.fstat(fd)
        _require_regular(path, st, UnwritableFile, "writes")
        if not st.st_mode & 0o222:  # root may write anyway; a read-only file says its owner does not want that
            raise UnwritableFile(path, _read_only(st))
        _lock(path, fd)
        with _alone(fd) as lease:
            try:
                current = _read_all(path, fd, len(expected), st.st_size)
            except UnreadableFile:
                current = None
            if current != expected:
                raise UnwritableFile(path, "it changed while specguard was fixing it; left as it is")
            if lease.held is False and len(data) < len(expected):  # its truncation could cut what they append
                raise UnwritableFile(
                    path,
                    "another program has it open (it may be writing to it), and the fix shortens it; close it and "
                    "run specguard again",
                )
            try:
                _write_over(path, fd, expected, data)
                _confirm(path, folder, name, fd, st, data)
            except UnwritableFile:
                if not lease.broken:
                    raise
            if lease.asked and not lease.broken and not lease.still_held():
                lease.broken = True  # it ran out while specguard wrote: the other program may have written too
            if lease.broken:  # what specguard wrote before the break is taken back; theirs stays
                _take_back(lease.real, expected, data)
                raise UnwritableFile(path, _BROKEN)
    except UnwritableFile:
        raise
    except OSError as exc:
        raise UnwritableFile(path, f"cannot write it: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


_LOCK_TRIES, _LOCK_PAUSE = 20, 0.005  # how long another program's advisory lock is waited for: 100 ms
_LEASES = fcntl is not None and hasattr(fcntl, "F_SETLEASE")  # Linux


def _lock(path: Path | str, fd: int) -> None:
    """The advisory lock (flock) that programs which cooperate take to write a file, for the comparison, the write
    and the check after it; another program holding it is waited for briefly, then named."""
    if fcntl is None:
        return
    for _ in range(_LOCK_TRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(_LOCK_PAUSE)
        except OSError:  # no locks here (ENOLCK on some network file systems): the lease and checks still hold
            return
    raise UnwritableFile(path, "it is locked by another program; left as it is")


class _Lease:
    """The write lease `_alone` holds on a file being fixed. `held`: True: granted; False: another program has the
    file open; None: no lease here (another user's file, a file system without leases, another OS, a thread that is
    not the main one). `asked`: another program asked for the file meanwhile (to open or truncate it) and waits;
    `broken`: the lease ran out before specguard was done, so that program may have written, and from then on every
    call specguard makes on the descriptor lands in a scratch file instead; `real`: the file itself, to take back
    what was written before."""

    def __init__(self, fd: int) -> None:
        self.fd, self.held, self.asked, self.broken, self.real = fd, None, False, False, -1

    def on_break(self, signum: int, frame: object) -> None:
        """The kernel signals a lease break to its holder as another program asks for the file. While the lease is
        still listed, that program waits, and the fix is finished first (microseconds). Once the kernel's
        lease-break-time has passed (specguard was held up that long) it is gone and the other program has the
        file: the descriptor is disarmed at once, before the call that was about to run on it, so no write of
        specguard lands after theirs."""
        with contextlib.suppress(OSError):
            if self.broken or fcntl.fcntl(self.real, fcntl.F_GETLEASE) == fcntl.F_WRLCK:
                return
        self.asked = True
        if not self.still_held():
            self.disarm()

    def still_held(self) -> bool:
        """Whether the lease is still listed (active, or being broken: the other program still waits); False
        where that cannot be known."""
        try:
            st = os.fstat(self.real)
            inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
            with open("/proc/locks", encoding="ascii", errors="replace") as listed:
                return any(line.split()[1:2] == ["LEASE"] and line.split()[5:6] == [inode] for line in listed)
        except OSError:
            return False

    def disarm(self) -> None:
        self.broken = True
        scratch = _scratch()
        os.dup2(scratch, self.fd)
        os.close(scratch)


def _scratch() -> int:
    """A file of no name, where the disarmed descriptor's calls land harmlessly."""
    if hasattr(os, "memfd_create"):
        with contextlib.suppress(OSError):
            return os.memfd_create("specguard-disarmed", os.MFD_CLOEXEC)
    return os.open(os.devnull, os.O_RDWR | _CLOEXEC)


@contextlib.contextmanager
def _alone(fd: int) -> Iterator[_Lease]:
    """A write lease on the open file (Linux): the kernel grants it only while no other program has the file open,
    and holds back any program that opens or truncates it until it is released, so nothing can be appended while
    specguard compares and writes. A program that asks meanwhile breaks it: the kernel signals specguard (SIGURG)
    and holds that program back until the lease is released or its lease-break-time has passed. Past it (specguard
    held up that long), `_Lease.on_break` disarms the descriptor, and the rewrite takes back what it wrote and
    reports a conflict."""
    lease = _Lease(fd)
    previous: Any = None
    installed = False
    # by SIGURG, ignored by default, rather than SIGIO, which would end the process; never where the program running
    # specguard handles SIGURG itself. SA_RESTART (siginterrupt False): the other program's call is not failed.
    if _LEASES and signal.getsignal(signal.SIGURG) in (signal.SIG_DFL, signal.SIG_IGN, None):
        try:
            lease.real = os.dup(fd)
            previous, installed = signal.signal(signal.SIGURG, lease.on_break), True
            signal.siginterrupt(signal.SIGURG, False)
            fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
            lease.held = True
        except (OSError, ValueError) as exc:  # ValueError: not the main thread, where no handler can be set
            lease.held = False if isinstance(exc, OSError) and exc.errno in (errno.EAGAIN, errno.EBUSY) else None
    try:
        yield lease
    finally:
        if lease.held:
            with contextlib.suppress(OSError):
                fcntl.fcntl(lease.real, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        if installed:
            signal.signal(signal.SIGURG, previous if previous is not None else signal.SIG_DFL)
        if lease.real >= 0:
            os.close(lease.real)


_BROKEN = "conflict: another program opened or changed it while specguard wrote the fix; its version is kept"


def _take_back(real: int, old: bytes, new: bytes) -> None:
    """After a lease break: where the file still holds exactly what specguard wrote (the head written over the old
    content, the tail appended after it, the end it cut off), the old bytes are put back; anything else is another
    program's and stays (their bytes after a truncation of ours follow the old content put back)."""
    if fcntl is not None:  # the append's O_APPEND may be left on it (set through the descriptor disarmed since)
        fcntl.fcntl(real, fcntl.F_SETFL, fcntl.fcntl(real, fcntl.F_GETFL) & ~os.O_APPEND)
    if len(new) < len(old):
        now = _pread_exact(real, len(old), 0)
        if now == new + old[len(new) :]:  # written over, not yet shortened
            _pwrite_all(real, old[: len(new)], 0)
        elif now[: len(new)] == new != old[: len(new)]:  # shortened too: what follows it now is theirs
            after = _pread_exact(real, os.fstat(real).st_size - len(new), len(new))
            _pwrite_all(real, old + after, 0)
        return
    if _pread_exact(real, len(old), 0) == new[: len(old)] != old:
        _pwrite_all(real, old, 0)
    tail = new[len(old) :]
    if tail and _pread_exact(real, len(old), 0) == old and _pread_exact(real, len(tail), len(old)) == tail:
        _cut(real, len(old), len(tail))


def _open_failure(folder: int, name: str, exc: OSError) -> str:
    with contextlib.suppress(OSError):
        st = os.stat(name, dir_fd=folder, follow_symlinks=False)
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
    """Replace `old` (the file's content) by `new`, never over bytes another program appended meanwhile: the part
    past the old end is appended (O_APPEND: after whatever they appended, never over it), the rest written over
    the old content's own bytes, and a shorter file truncated only after the whole file was compared again. What
    may fail for lack of room (the appended part) is written first; any failure puts `old` back. Another program's
    appended bytes, seen here, are kept: their version (the old content and what they appended) is put back, and
    the conflict reported."""
    ours: list[tuple[int, int]] = []  # where the bytes specguard appended lie
    try:
        if len(new) > len(old):
            _append(fd, new[len(old) :], ours)
            if ours != [(len(old), len(new) - len(old))]:  # they appended between the comparison and this write
                _put_back(fd, old, ours)
                raise UnwritableFile(path, _APPENDED)
        _pwrite_all(fd, new[: len(old)], 0)
        if len(new) < len(old):
            _shorten(path, fd, old, new)
    except UnwritableFile:
        raise
    except BaseException as exc:
        restored = False
        with contextlib.suppress(OSError):
            _put_back(fd, old, ours)
            restored = True
        if isinstance(exc, OSError):
            kept = "left as it was" if restored else "and its old content could not be put back: check it"
            raise UnwritableFile(path, f"cannot write it: {exc.strerror or exc}; {kept}") from None
        raise


_APPENDED = "conflict: another program appended to it while specguard wrote the fix; its version is kept"


def _append(fd: int, data: bytes, ours: list[tuple[int, int]]) -> None:
    """Append `data` at the end of the file as it is at that moment (O_APPEND), noting where each part landed."""
    flags = fcntl.fcntl(fd, fcntl.F_GETFL) if fcntl is not None else None
    if flags is None:
        _pwrite_all(fd, data, os.fstat(fd).st_size)
        ours.append((os.fstat(fd).st_size - len(data), len(data)))
        return
    fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_APPEND)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            ours.append((os.lseek(fd, 0, os.SEEK_CUR) - written, written))
            view = view[written:]
    finally:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags)  # pwrite on an O_APPEND file would append too (Linux)


def _shorten(path: Path | str, fd: int, old: bytes, new: bytes) -> None:
    """Truncate the file to `new`, once it is seen to hold `new`, the rest of `old` and nothing else: what another
    program appended makes it put `old` back (before their bytes) and report the conflict. Between the size check
    and the truncation lies the one moment an append could still be cut (none while a lease is held)."""
    expected = new + old[len(new) :]
    now = _pread_exact(fd, len(old) + 1, 0)
    if now != expected and not now.startswith(expected):
        raise UnwritableFile(path, "conflict: another program wrote to it while specguard did; check the file")
    if now != expected or os.fstat(fd).st_size != len(old):
        _pwrite_all(fd, old[: len(new)], 0)
        raise UnwritableFile(path, _APPENDED)
    os.ftruncate(fd, len(new))


def _put_back(fd: int, old: bytes, ours: list[tuple[int, int]]) -> None:
    """The file as it was with what others appended since: the bytes specguard appended taken out (each a size
    check before the truncation that ends it), `old` written over its own bytes again."""
    for start, length in reversed(ours):
        _cut(fd, start, length)
    _pwrite_all(fd, old, 0)


def _cut(fd: int, start: int, length: int) -> None:
    """Take `length` bytes out at `start`, moving what follows back; redone where more was appended meanwhile."""
    for _ in range(8):
        size = os.fstat(fd).st_size
        after = _pread_exact(fd, size - start - length, start + length)
        _pwrite_all(fd, after, start)
        if os.fstat(fd).st_size == size:
            os.ftruncate(fd, size - length)
            return
        start += len(after)  # more came: the spare bytes now lie before it
    raise OSError(errno.EAGAIN, "another program keeps appending to it")


def _pread_exact(fd: int, size: int, offset: int) -> bytes:
    """Up to `size` bytes from `offset`, fewer only at the end of the file."""
    chunks, got = [], 0
    while got < size:
        chunk = os.pread(fd, size - got, offset + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _confirm(path: Path | str, folder: int, name: str, fd: int, st: os.stat_result, data: bytes) -> None:
    """The check after writing: still the same file under the name, holding what was written (bytes past it were
    appended by another program after the fix was written, and stay)."""
    try:
        now = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except OSError:
        now = None
    if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        raise UnwritableFile(
            path, "conflict: another program replaced it while specguard wrote the fix; its version is kept"
        )
    if _pread_exact(fd, len(data), 0) != data:
        raise UnwritableFile(path, "conflict: another program wrote to it while specguard did; check the file")
