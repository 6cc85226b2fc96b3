"""Run `python -m specguard ARGS` in this process after patching low-level os/io functions.

usage: python _hookdriver.py HOOK.json ARGS...

HOOK.json modes (all paths absolute):

- swap: the `nth` time (default 1) the tool does a write-intent operation (kind "write": os.open with a
  write flag, open() in a write mode, mkdir, replace/rename, link, unlink, truncate, chmod...) or any
  operation on a cache path (kind "clean": also read-only opens, scandir/listdir, rmdir, unlink) whose
  path lies under one of `trigger` -- the folder `watch` is moved to `aside` and replaced by a symlink
  to `outside` (an out-of-tree copy), then the tool's call goes on.
- race: a thread flips `watch` between the real folder and a symlink to `outside`, at most `flips`
  times, while the tool runs; the real folder is put back at the end.
- interfere: right after the tool's first write to `target` (when=after_first_write), after its first
  truncate (after_truncate; at the close of the file when it never truncates), or just before it closes
  it (at_close), another writer acts on the file through its own descriptor: `append` (O_APPEND),
  `rewrite` (in-place, truncating), or `atomic` (a temp file renamed over it).

A JSON report (fired, events, errors) is written to cfg["report"] at exit.
"""

import builtins
import io
import json
import os
import runpy
import sys
import threading

CFG = json.load(open(sys.argv[1]))
REPORT = {"fired": False, "events": [], "errors": [], "mode": CFG.get("mode")}
R = {n: getattr(os, n) for n in dir(os) if callable(getattr(os, n, None))}
REAL_OPEN = builtins.open
REAL_IO_OPEN = io.open
_tls = threading.local()
_count = {"n": 0}

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _save_report():
    try:
        with REAL_OPEN(CFG["report"], "w") as fh:
            json.dump(REPORT, fh)
    except Exception:
        pass


def _ev(*a):
    if len(REPORT["events"]) < 400:
        REPORT["events"].append([str(x)[:300] for x in a])
    if not _busy_saving[0]:
        _busy_saving[0] = True
        try:
            _save_report()
        finally:
            _busy_saving[0] = False


_busy_saving = [False]


def _fdpath(fd):
    try:
        return R["readlink"](f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _resolve(path, dir_fd=None):
    try:
        if isinstance(path, int):
            return _fdpath(path)
        p = os.fsdecode(os.fspath(path))
        if not os.path.isabs(p):
            base = R["getcwd"]() if dir_fd is None else _fdpath(dir_fd)
            if base is None:
                return None
            p = os.path.join(base, p)
        return os.path.normpath(p)
    except Exception:
        return None


def _under(p, prefix):
    return p is not None and (p == prefix or p.startswith(prefix.rstrip("/") + "/"))


class _Guard:
    def __enter__(self):
        self.prev = getattr(_tls, "busy", False)
        _tls.busy = True
        return self

    def __exit__(self, *a):
        _tls.busy = self.prev


def _busy():
    return getattr(_tls, "busy", False)


# ------------------------------------------------------------------------------------------------ swap


def _swap():
    w, aside, outside = CFG["watch"], CFG["aside"], CFG["outside"]
    R["rename"](w, aside)
    R["symlink"](outside, w)
    REPORT["fired"] = True
    _ev("SWAPPED", w, "->", outside)


def _maybe_swap(op, *paths):
    if REPORT["fired"] or _busy():
        return
    for p in paths:
        if p is None:
            continue
        if any(_under(p, t) for t in CFG["trigger"]):
            if CFG.get("kind") == "clean" and ".specguard_cache" not in p and not CFG.get("any_path"):
                continue
            _count["n"] += 1
            _ev("trigger-candidate", op, p, _count["n"])
            if _count["n"] >= CFG.get("nth", 1):
                with _Guard():
                    try:
                        _swap()
                    except Exception as exc:  # pragma: no cover - reported
                        REPORT["errors"].append(f"swap failed: {exc!r}")
            return


def install_swap():
    clean = CFG.get("kind") == "clean"

    def w_open(path, flags, mode=0o777, *, dir_fd=None):
        if (flags & WRITE_FLAGS) or clean:
            _maybe_swap("os.open", _resolve(path, dir_fd))
        return R["open"](path, flags, mode, dir_fd=dir_fd)

    def b_open(file, mode="r", *a, **k):
        if not isinstance(file, int) and (any(c in mode for c in "wax+") or clean):
            _maybe_swap("open", _resolve(file))
        return REAL_OPEN(file, mode, *a, **k)

    def mk2(name):
        real = R[name]

        def f(src, dst, *a, src_dir_fd=None, dst_dir_fd=None, **k):
            _maybe_swap(name, _resolve(dst, dst_dir_fd), _resolve(src, src_dir_fd))
            kw = dict(k)
            if src_dir_fd is not None:
                kw["src_dir_fd"] = src_dir_fd
            if dst_dir_fd is not None:
                kw["dst_dir_fd"] = dst_dir_fd
            return real(src, dst, *a, **kw)

        return f

    def mk1(name, fdarg="dir_fd"):
        real = R[name]

        def f(path, *a, **k):
            _maybe_swap(name, _resolve(path, k.get("dir_fd")))
            return real(path, *a, **k)

        return f

    os.open = w_open
    builtins.open = b_open
    io.open = b_open
    for n in ("replace", "rename"):
        setattr(os, n, mk2(n))

    def f_link(src, dst, *a, src_dir_fd=None, dst_dir_fd=None, **k):
        _maybe_swap("link", _resolve(dst, dst_dir_fd))
        kw = dict(k)
        if src_dir_fd is not None:
            kw["src_dir_fd"] = src_dir_fd
        if dst_dir_fd is not None:
            kw["dst_dir_fd"] = dst_dir_fd
        return R["link"](src, dst, *a, **kw)

    os.link = f_link

    def f_symlink(src, dst, *a, **k):
        _maybe_swap("symlink", _resolve(dst, k.get("dir_fd")))
        return R["symlink"](src, dst, *a, **k)

    os.symlink = f_symlink
    for n in ("mkdir", "unlink", "remove", "rmdir", "truncate", "chmod", "chown", "utime"):
        if n in R:
            setattr(os, n, mk1(n))
    if clean:

        def f_scandir(path="."):
            _maybe_swap("scandir", _resolve(path))
            return R["scandir"](path)

        def f_listdir(path="."):
            _maybe_swap("listdir", _resolve(path))
            return R["listdir"](path)

        os.scandir = f_scandir
        os.listdir = f_listdir


# ------------------------------------------------------------------------------------------------ race


def install_race():
    stop = threading.Event()
    w, aside, outside = CFG["watch"], CFG["aside"], CFG["outside"]

    def flipper():
        n = 0
        try:
            while not stop.is_set() and n < CFG.get("flips", 100000):
                R["rename"](w, aside)
                R["symlink"](outside, w)
                n += 1
                R["unlink"](w)
                R["rename"](aside, w)
        except Exception as exc:
            REPORT["errors"].append(f"flip failed: {exc!r}")
        REPORT["flips"] = n
        REPORT["fired"] = n > 0

    t = threading.Thread(target=flipper, daemon=True)
    t.start()

    def finish():
        stop.set()
        t.join(30)
        # leave the real folder in place
        if os.path.islink(w):
            R["unlink"](w)
        if not os.path.lexists(w) and os.path.isdir(aside):
            R["rename"](aside, w)

    return finish


# ------------------------------------------------------------------------------------------- interfere


def install_interfere():
    target = CFG["target"]
    real_target = os.path.realpath(target)
    when = CFG["when"]
    state = {"writes": 0, "truncs": 0, "done": False}

    def is_target_fd(fd):
        p = _fdpath(fd)
        return p is not None and (p == real_target or p == real_target + " (deleted)")

    def act(where):
        if state["done"] or _busy():
            return
        state["done"] = True
        with _Guard():
            try:
                action = CFG["action"]
                if action == "append":
                    fd = R["open"](target, os.O_WRONLY | os.O_APPEND)
                    try:
                        R["write"](fd, CFG["payload"].encode())
                    finally:
                        R["close"](fd)
                elif action == "rewrite":
                    fd = R["open"](target, os.O_WRONLY | os.O_TRUNC)
                    try:
                        R["write"](fd, CFG["content"].encode())
                    finally:
                        R["close"](fd)
                elif action == "atomic":
                    tmp = target + ".editor~"
                    fd = R["open"](tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    try:
                        R["write"](fd, CFG["content"].encode())
                    finally:
                        R["close"](fd)
                    R["rename"](tmp, target)
                REPORT["fired"] = True
                _ev("INTERFERED", action, where)
            except Exception as exc:
                REPORT["errors"].append(f"interfere failed: {exc!r}")

    def after_write(fd_or_none, where):
        state["writes"] += 1
        if when == "after_first_write" and state["writes"] == 1:
            act(where)

    def after_trunc(where):
        state["truncs"] += 1
        if when == "after_truncate" and state["truncs"] == 1:
            act(where)

    def before_close(where):
        if when == "at_close" or (when == "after_truncate" and state["truncs"] == 0 and state["writes"] > 0):
            act(where)

    def wrap_fdwrite(name):
        real = R[name]

        def f(fd, *a, **k):
            r = real(fd, *a, **k)
            if not _busy() and is_target_fd(fd):
                _ev(name, fd)
                after_write(fd, name)
            return r

        return f

    for n in ("write", "pwrite", "writev", "pwritev"):
        if n in R:
            setattr(os, n, wrap_fdwrite(n))

    def f_ftruncate(fd, length):
        r = R["ftruncate"](fd, length)
        if not _busy() and is_target_fd(fd):
            _ev("ftruncate", fd, length)
            after_trunc("ftruncate")
        return r

    os.ftruncate = f_ftruncate

    def f_truncate(path, length):
        r = R["truncate"](path, length)
        if not _busy() and (isinstance(path, int) and is_target_fd(path) or _resolve(path) == os.path.normpath(target)):
            after_trunc("truncate")
        return r

    os.truncate = f_truncate

    def f_close(fd):
        if not _busy() and is_target_fd(fd) and state["writes"] > 0:
            _ev("close", fd)
            before_close("close")
        return R["close"](fd)

    os.close = f_close

    def mk_replace(name):
        real = R[name]

        def f(src, dst, *a, **k):
            r = real(src, dst, *a, **k)
            d = _resolve(dst, k.get("dst_dir_fd"))
            if not _busy() and d is not None and os.path.realpath(d) == real_target:
                _ev(name, src, dst)
                state["writes"] += 1
                state["truncs"] += 1
                act(name)
            return r

        return f

    os.replace = mk_replace("replace")
    os.rename = mk_replace("rename")

    class Proxy:
        def __init__(self, f):
            object.__setattr__(self, "_f", f)

        def __getattr__(self, n):
            return getattr(self._f, n)

        def __setattr__(self, n, v):
            setattr(self._f, n, v)

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.close()
            return False

        def __iter__(self):
            return iter(self._f)

        def write(self, b):
            r = self._f.write(b)
            self._f.flush()
            _ev("file.write")
            after_write(None, "file.write")
            return r

        def truncate(self, *a):
            self._f.flush()
            r = self._f.truncate(*a)
            _ev("file.truncate")
            after_trunc("file.truncate")
            return r

        def close(self):
            if not self._f.closed and state["writes"] > 0:
                self._f.flush()
                before_close("file.close")
            return self._f.close()

    def b_open(file, mode="r", *a, **k):
        f = REAL_OPEN(file, mode, *a, **k)
        if not _busy() and not isinstance(file, int) and any(c in mode for c in "wa+x"):
            p = _resolve(file)
            if p is not None and os.path.realpath(p) == real_target:
                return Proxy(f)
        return f

    builtins.open = b_open
    io.open = b_open


# ------------------------------------------------------------------------------------------------ main


def _exit_wrapper(code):
    try:
        if _finish[0] is not None:
            _finish[0]()
    except Exception as exc:
        REPORT["errors"].append(f"finish failed: {exc!r}")
    _save_report()
    R["_exit"](code)


_finish = [None]


def main():
    os._exit = _exit_wrapper
    mode = CFG["mode"]
    finish = None
    if mode == "swap":
        install_swap()
    elif mode == "race":
        finish = install_race()
    elif mode == "interfere":
        install_interfere()
    else:
        raise SystemExit(f"unknown hook mode {mode!r}")
    _finish[0] = finish
    _save_report()
    sys.argv = ["specguard", *sys.argv[2:]]
    code = 0
    try:
        runpy.run_module("specguard", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    finally:
        if finish is not None:
            _finish[0] = None
            try:
                finish()
            except Exception as exc:
                REPORT["errors"].append(f"finish failed: {exc!r}")
        _save_report()
    if code is None:
        code = 0
    if not isinstance(code, int):
        sys.stderr.write(f"{code}\n")
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    R["_exit"](code)


if __name__ == "__main__":
    main()
