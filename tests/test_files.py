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
