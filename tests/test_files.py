"""Reading hostile files: only regular files, never blocking, never past the cap (specguard/_files.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specguard._files import UnreadableFile, read_regular, read_regular_text


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
