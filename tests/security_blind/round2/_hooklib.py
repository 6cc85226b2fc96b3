"""Runs inside the specguard process that `conftest.run_hooked` starts: helpers a test's hook code uses to
patch low-level calls (os.open, os.replace, os.write, ...) and to record that its attack really happened.

Nothing here imports specguard; the driver runs it with `runpy.run_module('specguard', run_name='__main__')`.
"""

import builtins
import fcntl
import os
import sys
import types

# the real functions, captured before any hook wraps them: a hook's own file operations use these
real = types.SimpleNamespace(
    open=os.open,
    close=os.close,
    read=os.read,
    write=os.write,
    pwrite=os.pwrite,
    ftruncate=os.ftruncate,
    rename=os.rename,
    replace=os.replace,
    mkdir=os.mkdir,
    makedirs=os.makedirs,
    rmdir=os.rmdir,
    unlink=os.unlink,
    symlink=os.symlink,
    link=os.link,
    scandir=os.scandir,
    listdir=os.listdir,
    chmod=os.chmod,
    chown=os.chown,
    lstat=os.lstat,
    stat=os.stat,
    utime=os.utime,
    mkfifo=os.mkfifo,
    flock=fcntl.flock,
    builtin_open=builtins.open,
)

_LOG = os.environ.get("SG_HOOK_LOG")


def mark(event):
    """Record that the attack step `event` happened (the test reads the log to prove the hook fired)."""
    if _LOG:
        fd = real.open(_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            real.write(fd, (str(event) + "\n").encode("utf-8", "backslashreplace"))
        finally:
            real.close(fd)


def fspath_str(p):
    """A path argument as text (str, bytes, PathLike or an fd)."""
    if isinstance(p, int):
        return ""
    p = os.fspath(p)
    if isinstance(p, bytes):
        return os.fsdecode(p)
    return p


def basename(p):
    return os.path.basename(fspath_str(p).rstrip("/"))


def wrap(mod, name, before=None, after=None):
    """Replace `mod.name` by a wrapper: `before(*args, **kwargs)` runs first, then the real call, then
    `after(result, *args, **kwargs)`. Returns the real function."""
    f = getattr(mod, name)

    def wrapper(*args, **kwargs):
        if before is not None:
            before(*args, **kwargs)
        result = f(*args, **kwargs)
        if after is not None:
            after(result, *args, **kwargs)
        return result

    wrapper.__name__ = getattr(f, "__name__", name)
    setattr(mod, name, wrapper)
    return f


class Once:
    """A latch: `once()` is True the first time only."""

    def __init__(self):
        self.fired = False

    def __call__(self):
        if self.fired:
            return False
        self.fired = True
        return True


def write_file(path, data, mode=0o644):
    fd = real.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        real.write(fd, data)
    finally:
        real.close(fd)


def swap_dir_for_link(path, target):
    """Move the folder `path` aside (to path + '.moved') and put a symlink to `target` in its place."""
    real.rename(path, path + ".moved")
    real.symlink(target, path)


def flags_write(flags):
    return bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))


def stderr(msg):
    sys.__stderr__.write(msg + "\n")
