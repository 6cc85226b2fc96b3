"""Reading hostile files (only regular files, never blocking, never past the cap) and writing without loss
(specguard/_files.py)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from specguard._files import (
    UnreadableFile,
    UnwritableFile,
    read_regular,
    read_regular_text,
    replace_atomically,
    rewrite_in_place,
)


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    f = tmp_path / "a.py"
    f.write_bytes(b"x = 1\n" * 1000)
    assert read_regular(f, 1 << 20) == b"x = 1\n" * 1000
    assert read_regular_text(f) == "x = 1\n" * 1000


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)  # nobody ever writes to it: a blocking open would hang the test forever
    with pytest.raises(UnreadableFile, match=r"not a regular file \(a FIFO\)"):
        read_regular(fifo, 1 << 20)


def test_a_link_to_dev_zero_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "zero.py"
    link.symlink_to("/dev/zero")
    with pytest.raises(UnreadableFile, match=r"a character device"):
        read_regular(link, 1 << 20)


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnreadableFile, match=r"a directory"):
        read_regular(tmp_path, 1 << 20)


def test_a_file_over_the_cap_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "big.py"
    f.write_bytes(b"#" * 1001)
    with pytest.raises(UnreadableFile, match=r"file too large \(1001 bytes; the limit is 1000\)"):
        read_regular(f, 1000)
    assert read_regular(f, 1001) == b"#" * 1001


def test_a_missing_file_and_bad_utf8_say_so(tmp_path: Path) -> None:
    with pytest.raises(UnreadableFile, match=r"cannot read file: No such file"):
        read_regular(tmp_path / "nope.py", 10)
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(UnreadableFile, match=r"not UTF-8 text"):
        read_regular_text(bad)


# ---- writing: specguard's own files atomically, the user's sources in place ----------------------------------


def _in_child_with_file_size_limit(limit: int, code: str) -> subprocess.CompletedProcess:
    """`code` in a child process that may not write past `limit` bytes of any file (RLIMIT_FSIZE): the state a full
    disk or a quota leaves a write in, part-way."""
    prelude = f"import resource\nresource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=60)


def test_replace_atomically_keeps_the_mode_and_replaces_a_link_not_its_target(tmp_path: Path) -> None:
    old = tmp_path / "baseline.json"
    old.write_bytes(b"old")
    old.chmod(0o640)
    replace_atomically(old, b"new")
    assert old.read_bytes() == b"new" and stat.S_IMODE(old.stat().st_mode) == 0o640
    fresh = tmp_path / "fresh.json"
    replace_atomically(fresh, b"x")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep")
    link = tmp_path / "link"
    link.symlink_to(outside)
    replace_atomically(link, b"data")
    assert not link.is_symlink() and link.read_bytes() == b"data" and outside.read_bytes() == b"keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["baseline.json", "fresh.json", "link", "outside"]


def test_replace_atomically_keeps_the_old_file_whole_when_the_write_fails(tmp_path: Path) -> None:
    target = tmp_path / "baseline.json"
    target.write_bytes(b"previous content\n")
    code = (
        "from specguard._files import replace_atomically\n"
        f"try:\n    replace_atomically({str(target)!r}, b'x' * 100_000)\n"
        "except OSError as exc:\n    print('refused:', exc.strerror)\n"
    )
    out = _in_child_with_file_size_limit(1000, code)
    assert out.stdout.strip() == "refused: File too large", out.stderr
    assert target.read_bytes() == b"previous content\n"
    assert [p.name for p in tmp_path.iterdir()] == ["baseline.json"]  # no temp file left


def test_rewrite_in_place_keeps_hard_links_mode_and_extended_attributes(tmp_path: Path) -> None:
    source = tmp_path / "spec.py"
    source.write_bytes(b"old\n")
    source.chmod(0o750)
    other_name = tmp_path / "also.py"
    os.link(source, other_name)
    os.setxattr(source, "user.origin", b"kept")
    rewrite_in_place(source, b"old\n", b"new and longer\n")
    assert other_name.read_bytes() == b"new and longer\n" == source.read_bytes()
    assert os.getxattr(source, "user.origin") == b"kept" and stat.S_IMODE(source.stat().st_mode) == 0o750
    rewrite_in_place(source, b"new and longer\n", b"short\n")
    assert other_name.read_bytes() == b"short\n"


@pytest.mark.parametrize("mode", [0o444, 0o400, 0o555])
def test_rewrite_in_place_refuses_a_read_only_file(tmp_path: Path, mode: int) -> None:
    """Refused even where the write would succeed (root ignores modes): read-only says its owner wants it kept."""
    source = tmp_path / "spec.py"
    source.write_bytes(b"old\n")
    source.chmod(mode)
    with pytest.raises(UnwritableFile, match=rf"it is read-only \(mode {mode:04o}\); make it writable"):
        rewrite_in_place(source, b"old\n", b"new\n")
    assert source.read_bytes() == b"old\n"


def test_rewrite_in_place_refuses_a_symlink_a_fifo_and_changed_content(tmp_path: Path) -> None:
    target = tmp_path / "target.py"
    target.write_bytes(b"old\n")
    link = tmp_path / "link.py"
    link.symlink_to(target)
    with pytest.raises(UnwritableFile, match="it is a symlink"):
        rewrite_in_place(link, b"old\n", b"new\n")
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    with pytest.raises(UnwritableFile, match=r"not a regular file \(a FIFO\)"):
        rewrite_in_place(fifo, b"old\n", b"new\n")
    with pytest.raises(UnwritableFile, match="it changed while specguard was fixing it"):
        rewrite_in_place(target, b"other\n", b"new\n")
    assert target.read_bytes() == b"old\n"


def test_rewrite_in_place_puts_the_old_content_back_when_the_write_fails(tmp_path: Path) -> None:
    source = tmp_path / "spec.py"
    old = b"x = 1\n" * 100  # 600 bytes
    source.write_bytes(old)
    code = (
        "from specguard._files import UnwritableFile, rewrite_in_place\n"
        f"try:\n    rewrite_in_place({str(source)!r}, {old!r}, b'y = 2\\n' * 1000)\n"
        "except UnwritableFile as exc:\n    print(exc.reason)\n"
    )
    out = _in_child_with_file_size_limit(1000, code)
    assert out.stdout.strip() == "cannot write it: File too large; left as it was", out.stderr
    assert source.read_bytes() == old


def test_rewrite_in_place_reports_a_file_replaced_while_it_wrote(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from specguard import _files

    source = tmp_path / "spec.py"
    source.write_bytes(b"old\n")
    real_write = _files._write_over

    def editor_saves_meanwhile(path, fd, old, new):  # type: ignore[no-untyped-def]
        real_write(path, fd, old, new)
        saved = tmp_path / ".spec.py.swp"
        saved.write_bytes(b"the editor's version\n")
        os.replace(saved, source)  # an editor's atomic save lands between the write and the check after it

    monkeypatch.setattr(_files, "_write_over", editor_saves_meanwhile)
    with pytest.raises(UnwritableFile, match="conflict: another program replaced it while specguard wrote the fix"):
        rewrite_in_place(source, b"old\n", b"new\n")
    assert source.read_bytes() == b"the editor's version\n"


# ---- open_beneath: a path walked beneath a held folder, links resolved by specguard, never out of it ----------


def _tree_with_links(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "a" / "b").mkdir(parents=True)
    outside.mkdir()
    (root / "a" / "b" / "f.py").write_bytes(b"inside\n")
    (outside / "f.py").write_bytes(b"outside\n")
    (root / "rel").symlink_to("a/b")  # links that stay inside: relative, with `..`, absolute
    (root / "a" / "up").symlink_to("../a/b/f.py")
    (root / "abs").symlink_to(root / "a" / "b")
    (root / "out").symlink_to(outside)  # and ones that leave: absolute, relative, through `..`
    (root / "a" / "esc").symlink_to("../../outside/f.py")
    (root / "dotdot").symlink_to("..")
    (root / "loop").symlink_to("loop")
    return root, outside


@pytest.mark.parametrize("relative", ["a/b/f.py", "rel/f.py", "a/up", "abs/f.py", "a/../a/b/f.py", "./rel/../b/f.py"])
def test_open_beneath_follows_links_that_stay_inside(tmp_path: Path, relative: str) -> None:
    from specguard._files import open_beneath, open_folder

    root, _ = _tree_with_links(tmp_path)
    top = open_folder(root)
    try:
        fd = open_beneath(top, relative, os.O_RDONLY)
        assert os.read(fd, 100) == b"inside\n"
        os.close(fd)
    finally:
        os.close(top)


@pytest.mark.parametrize(
    ("relative", "how"),
    [
        ("out/f.py", "the link out -> {outside}"),
        ("a/esc", "the link a/esc -> ../../outside/f.py"),
        ("dotdot/outside/f.py", "the link dotdot -> .."),
        ("../outside/f.py", "'../outside/f.py'"),
        ("a/../../outside/f.py", "'a/../../outside/f.py'"),
    ],
)
def test_open_beneath_refuses_every_way_out(tmp_path: Path, relative: str, how: str) -> None:
    from specguard._files import OutsideTree, open_beneath, open_folder

    root, outside = _tree_with_links(tmp_path)
    top = open_folder(root)
    try:
        for flags in (os.O_RDONLY, os.O_WRONLY | os.O_CREAT | os.O_TRUNC):
            with pytest.raises(OutsideTree) as caught:
                open_beneath(top, relative, flags)
            assert caught.value.how == how.format(outside=outside)
    finally:
        os.close(top)
    assert (outside / "f.py").read_bytes() == b"outside\n"


def test_open_beneath_bounds_links_honours_nofollow_and_makes_folders(tmp_path: Path) -> None:
    import errno

    from specguard._files import FOLDER, locate_beneath, open_beneath, open_folder

    root, _ = _tree_with_links(tmp_path)
    top = open_folder(root)
    try:
        with pytest.raises(OSError) as loop:
            open_beneath(top, "loop", os.O_RDONLY)
        assert loop.value.errno == errno.ELOOP
        with pytest.raises(OSError) as nofollow:  # the caller's O_NOFOLLOW: a link at the end is not resolved
            open_beneath(top, "rel", FOLDER | os.O_NOFOLLOW)
        assert nofollow.value.errno in (errno.ELOOP, errno.ENOTDIR)
        with pytest.raises(OSError) as resolved:  # follow=False: a link anywhere is an error (a path already real)
            open_beneath(top, "rel/f.py", os.O_RDONLY, follow=False)
        assert resolved.value.errno == errno.ELOOP
        os.close(open_beneath(top, "new/deeper", FOLDER, make_folders=True))
        assert (root / "new" / "deeper").is_dir()
        (root / "dangling").symlink_to("a/b/made.py")  # a link inside to a file not yet there: made there
        os.close(open_beneath(top, "dangling", os.O_WRONLY | os.O_CREAT))
        assert (root / "a" / "b" / "made.py").is_file() and (root / "dangling").is_symlink()
        folder, name, fd = locate_beneath(top, "a/up")  # the place a link names, to replace or remove
        assert (name, fd) == ("f.py", -1) and os.stat(folder).st_ino == (root / "a" / "b").stat().st_ino
        os.close(folder)
    finally:
        os.close(top)


# ---- an append by another program while --fix writes in place (issue 26 item 10) ----------------------------
#
# Another program appends to the file (a logger, `echo >> file`) while rewrite_in_place writes it. Each syscall the
# writer makes on the file (the writes, the truncation) is wrapped, and the other program's append is played right
# before or right after each of them in turn. Its bytes must never be lost without a word: either the fix lands
# and their bytes follow it, or the fix is not applied (their version is kept, "conflict" or "open" said).

OLD = b"a = 1\n" * 50  # 300 bytes
NEW = {"shorter": b"b = 2\n" * 20, "same size": b"c = 3\n" * 50, "longer": b"d = 4\n" * 80}
APPENDED = b"# appended by another program\n"
_WRAPPED = ("pwrite", "write", "ftruncate")


class _Points:
    """Wraps os.pwrite/os.write/os.ftruncate; on the file's inode, runs `act` before or after the chosen call."""

    def __init__(self, monkeypatch, ino: int, chosen: tuple[int, str] | None, act) -> None:  # type: ignore[no-untyped-def]
        self.ino, self.chosen, self.act, self.seen = ino, chosen, act, []  # type: ignore[var-annotated]
        self.real = {name: getattr(os, name) for name in _WRAPPED}
        for name in _WRAPPED:
            monkeypatch.setattr(os, name, self._wrap(name))

    def _wrap(self, name: str):  # type: ignore[no-untyped-def]
        real = self.real[name]

        def wrapped(fd: int, *args):  # type: ignore[no-untyped-def]
            if os.fstat(fd).st_ino != self.ino or getattr(self, "busy", False):
                return real(fd, *args)
            index = len(self.seen)
            self.seen.append(name)
            self._maybe(index, "before", fd)
            result = real(fd, *args)
            self._maybe(index, "after", fd)
            return result

        return wrapped

    def _maybe(self, index: int, when: str, fd: int) -> None:
        if self.chosen == (index, when):
            self.busy = True
            try:
                self.act(fd)
            finally:
                self.busy = False


def _rewrite_with_an_append(monkeypatch, tmp_path: Path, new: bytes, chosen, act_factory):  # type: ignore[no-untyped-def]
    """rewrite_in_place(OLD -> new) with `act` played at `chosen`; the file's bytes after, and the refusal if any."""
    source = tmp_path / "spec.py"
    source.write_bytes(OLD)
    act, finish = act_factory(source)
    points = _Points(monkeypatch, source.stat().st_ino, chosen, act)
    reason = None
    try:
        rewrite_in_place(source, OLD, new)
    except UnwritableFile as exc:
        reason = exc.reason
    finally:
        monkeypatch.undo()
        finish()
    return source.read_bytes(), reason, points.seen


def _held_appender(source: Path):  # type: ignore[no-untyped-def]
    """A program that keeps the file open for appending (a logger) and appends once, when told."""
    fd = os.open(source, os.O_WRONLY | os.O_APPEND)
    return (lambda _fd: os.write(fd, APPENDED)), (lambda: os.close(fd))


def _outcome_keeps_their_bytes(data: bytes, reason: str | None, new: bytes) -> None:
    if reason is None:
        assert data == new + APPENDED  # the fix, then what they appended
    else:
        assert "conflict" in reason or "has it open" in reason, reason
        assert data in (OLD + APPENDED, new + APPENDED), data  # their version, or the fix with their bytes after it


@pytest.mark.parametrize("change", list(NEW))
def test_an_append_by_a_program_holding_the_file_open_is_never_lost(monkeypatch, tmp_path: Path, change: str) -> None:
    new = NEW[change]
    _, _, calls = _rewrite_with_an_append(monkeypatch, tmp_path, new, None, _held_appender)
    points = [(i, when) for i in range(len(calls)) for when in ("before", "after")]
    for chosen in [None, *points]:  # None: appended before the writer even compared (it then sees the file open)
        if chosen is None:
            source = tmp_path / "spec.py"
            source.write_bytes(OLD)
            act, finish = _held_appender(source)
            act(0)
            try:
                rewrite_in_place(source, OLD, new)
                data, reason = source.read_bytes(), None
            except UnwritableFile as exc:
                data, reason = source.read_bytes(), exc.reason
            finish()
            assert (data, reason) == (OLD + APPENDED, "it changed while specguard was fixing it; left as it is")
            continue
        data, reason, _ = _rewrite_with_an_append(monkeypatch, tmp_path, new, chosen, _held_appender)
        _outcome_keeps_their_bytes(data, reason, new)
    if change == "shorter":  # a truncation could cut their bytes: refused while another program has the file open
        data, reason, calls = _rewrite_with_an_append(monkeypatch, tmp_path, new, None, _held_appender)
        assert (data, calls) == (OLD, [])
        assert reason == (
            "another program has it open (it may be writing to it), and the fix shortens it; close it and run "
            "specguard again"
        )


@pytest.mark.parametrize("change", list(NEW))
def test_an_append_by_a_program_that_opens_the_file_meanwhile_lands_after_the_fix(
    monkeypatch, tmp_path: Path, change: str
) -> None:  # type: ignore[no-untyped-def]
    """`echo >> file` while specguard writes: the writer holds a lease on the file, so the other program's open
    waits (a few microseconds) until the fix is written, and its line lands after it, at every point."""
    import fcntl
    import threading
    import time

    new = NEW[change]
    blocked: list[bool] = []

    def fresh_appender(source: Path):  # type: ignore[no-untyped-def]
        threads: list[threading.Thread] = []

        def append() -> None:
            fd = os.open(source, os.O_WRONLY | os.O_APPEND)
            os.write(fd, APPENDED)
            os.close(fd)

        def act(writer_fd: int) -> None:
            leased = fcntl.fcntl(writer_fd, fcntl.F_GETLEASE) == fcntl.F_WRLCK
            threads.append(threading.Thread(target=append))
            threads[0].start()
            if not leased:  # nothing holds their open back: it lands now
                threads[0].join(timeout=60)
                blocked.append(False)
                return
            for _ in range(5000):  # until the kernel holds their open back: the writer's lease is being broken
                if fcntl.fcntl(writer_fd, fcntl.F_GETLEASE) != fcntl.F_WRLCK:
                    blocked.append(True)
                    return
                time.sleep(0.001)

        return act, lambda: [t.join(timeout=60) for t in threads]

    _, _, calls = _rewrite_with_an_append(monkeypatch, tmp_path, new, None, fresh_appender)
    for chosen in [(i, when) for i in range(len(calls)) for when in ("before", "after")]:
        blocked.clear()
        data, reason, _ = _rewrite_with_an_append(monkeypatch, tmp_path, new, chosen, fresh_appender)
        assert (data, reason, blocked) == (new + APPENDED, None, [True]), chosen


@pytest.mark.parametrize("change", list(NEW))
def test_without_a_lease_the_one_window_left_is_just_before_the_truncation(
    monkeypatch, tmp_path: Path, change: str
) -> None:  # type: ignore[no-untyped-def]
    """Where no lease can be had (a file of another user's, a file system without leases), the writer still never
    overwrites appended bytes, and compares the whole file before truncating; what is left is the moment between
    that comparison and the truncation of a fix that shortens the file (benchmarks/fix_write_window.py measures
    it): an append landing exactly there is cut. Every other point keeps their bytes."""
    from specguard import _files

    new = NEW[change]
    monkeypatch.setattr(_files, "_LEASES", False)
    _, _, calls = _rewrite_with_an_append(monkeypatch, tmp_path, new, None, _held_appender)
    lost = []
    for chosen in [(i, when) for i in range(len(calls)) for when in ("before", "after")]:
        monkeypatch.setattr(_files, "_LEASES", False)
        data, reason, seen = _rewrite_with_an_append(monkeypatch, tmp_path, new, chosen, _held_appender)
        if APPENDED not in data:
            lost.append((seen[chosen[0]], chosen[1]))
            continue
        _outcome_keeps_their_bytes(data, reason, new)
    assert lost == ([("ftruncate", "before")] if change == "shorter" else [])


def test_a_file_locked_by_another_program_is_not_written(tmp_path: Path) -> None:
    import fcntl

    source = tmp_path / "spec.py"
    source.write_bytes(OLD)
    with open(source, "rb") as other:
        fcntl.flock(other, fcntl.LOCK_EX)  # another program's advisory lock, for its own write
        with pytest.raises(UnwritableFile) as refused:
            rewrite_in_place(source, OLD, NEW["longer"])
        assert refused.value.reason == "it is locked by another program; left as it is"
    assert source.read_bytes() == OLD
    rewrite_in_place(source, OLD, NEW["longer"])  # once it lets go
    assert source.read_bytes() == NEW["longer"]


# Another program gets the file while specguard writes it: the kernel holds any program that opens or truncates it
# back while specguard's lease lasts, but only for its lease-break-time (45 s by default); a writer held up longer
# (stopped, or swapped out) finds the lease gone and the other program's version already written. Played here at
# each of the writer's calls: the lease is let go as the kernel lets it go, the other program acts, and the break
# signal the kernel sent is delivered. No call of the writer may land after theirs: their version is kept whole,
# and "conflict" is said.

_THEIRS = {
    "truncates it": lambda source: os.truncate(source, 0),
    "overwrites it, same size": lambda source: source.write_bytes(b"Z" * len(OLD)),
    "appends": lambda source: source.open("ab").write(APPENDED),
}


def _expired_then(action):  # type: ignore[no-untyped-def]
    import fcntl
    import signal

    def factory(source: Path):  # type: ignore[no-untyped-def]
        def act(writer_fd: int) -> None:
            fcntl.fcntl(writer_fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)  # the lease-break-time ran out
            action(source)
            os.kill(os.getpid(), signal.SIGURG)  # the break the kernel signalled, handled only now

        return act, lambda: None

    return factory


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="leases and their break signal are Linux's")
@pytest.mark.parametrize("theirs", list(_THEIRS))
@pytest.mark.parametrize("change", list(NEW))
def test_a_program_that_gets_the_file_once_the_lease_ran_out_keeps_its_version(
    monkeypatch, tmp_path: Path, change: str, theirs: str
) -> None:  # type: ignore[no-untyped-def]
    new, action = NEW[change], _THEIRS[theirs]
    _, _, calls = _rewrite_with_an_append(monkeypatch, tmp_path, new, None, _expired_then(action))
    assert calls, "the writer wrote"
    expected = tmp_path / "expected.py"
    expected.write_bytes(OLD)
    action(expected)
    for i in range(len(calls)):
        data, reason, _ = _rewrite_with_an_append(monkeypatch, tmp_path, new, (i, "before"), _expired_then(action))
        assert reason is not None and "conflict" in reason, (i, reason)
        assert data == expected.read_bytes(), (calls, i)  # their version, as they wrote it
        if theirs == "appends":  # after one of the writer's calls: what it wrote is taken back, their line stays
            data, reason, _ = _rewrite_with_an_append(monkeypatch, tmp_path, new, (i, "after"), _expired_then(action))
            assert (data, "conflict" in (reason or "")) == (OLD + APPENDED, True), (calls, i)
