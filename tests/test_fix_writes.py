"""What `--fix` writes, and what it refuses to (issue 16 items 6, 7 and 8).

Only files whose real path lies under the paths checked, as ruff; in place, so that every name of a file sees the
fix and its mode and extended attributes stay; never a read-only file; and an edit saved by someone else while
specguard writes is never lost without a word.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.test_fixes import SAFE, SAFE_FIXED


def _digest_tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("flag", ["--fix", "--diff"])
def test_a_symlink_out_of_the_tree_is_neither_fixed_nor_diffed_and_is_named(cli, tmp_path: Path, flag: str) -> None:  # type: ignore[no-untyped-def]
    outside = tmp_path / "outside"
    (outside / "lib").mkdir(parents=True)
    (outside / "victim.py").write_text(SAFE)
    (outside / "lib" / "spec.py").write_text(SAFE)
    before = _digest_tree(outside)
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "own.py").write_text(SAFE)
    (project / "pkg" / "victim.py").symlink_to(outside / "victim.py")  # a link to a file out of the tree
    (project / "pkg" / "vendored").symlink_to(outside / "lib")  # and to a folder
    out = cli("check", "pkg", flag, "--no-cache", cwd=project)
    assert _digest_tree(outside) == before
    real = os.path.realpath(outside)
    assert out.stderr.splitlines() == [  # not even read: discovery does not leave the tree (issue 26 item 4)
        f"specguard: note: 2 symlinks lead out of the folders checked and were not followed: pkg/vendored -> "
        f"{real}/lib; pkg/victim.py -> {real}/victim.py; name a target on the command line to check it"
    ]
    assert "victim" not in out.stdout and "vendored" not in out.stdout
    if flag == "--fix":
        assert (project / "pkg" / "own.py").read_text() == SAFE_FIXED
    else:
        assert "+++ pkg/own.py" in out.stdout


def test_a_symlink_inside_the_tree_is_fixed_through_and_stays_a_link(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "pkg" / "impl").mkdir(parents=True)
    (tmp_path / "pkg" / "impl" / "spec.py").write_text(SAFE)
    (tmp_path / "pkg" / "spec_alias.py").symlink_to("impl/spec.py")
    out = cli("check", "pkg", "--fix", "--no-cache", cwd=tmp_path)
    assert out.stderr == "" and out.returncode == 0
    assert (tmp_path / "pkg" / "spec_alias.py").is_symlink()
    assert (tmp_path / "pkg" / "impl" / "spec.py").read_text() == SAFE_FIXED


@pytest.mark.parametrize("mode", [0o444, 0o440], ids=["0444", "0440"])
def test_a_read_only_file_is_refused_with_a_message_and_the_others_are_fixed(cli, tmp_path: Path, mode: int) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "frozen.py").write_text(SAFE)
    (tmp_path / "frozen.py").chmod(mode)
    (tmp_path / "open.py").write_text(SAFE)
    out = cli("check", ".", "--fix", "--no-cache", cwd=tmp_path)
    assert (tmp_path / "frozen.py").read_text() == SAFE and stat.S_IMODE(
        (tmp_path / "frozen.py").stat().st_mode
    ) == mode
    assert (tmp_path / "open.py").read_text() == SAFE_FIXED
    assert out.stderr.splitlines() == [
        f"specguard: warning: frozen.py: not fixed: it is read-only (mode {mode:04o}); make it writable to have it "
        "fixed"
    ]
    assert out.returncode == 1 and "frozen.py:5:9: SG102 [*]" in out.stdout


def test_every_name_of_a_hard_linked_file_sees_the_fix_with_its_mode_and_attributes_kept(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "pkg").mkdir()
    spec = tmp_path / "pkg" / "spec.py"
    spec.write_text(SAFE)
    spec.chmod(0o750)
    os.setxattr(spec, "user.reviewed-by", b"someone")
    other = tmp_path / "other-name.py"  # a second name, outside the folder checked
    os.link(spec, other)
    inode = spec.stat().st_ino
    out = cli("check", "pkg", "--fix", "--no-cache", cwd=tmp_path)
    assert out.stderr == "" and out.returncode == 0
    assert spec.read_text() == SAFE_FIXED == other.read_text()
    assert spec.stat().st_ino == inode and spec.stat().st_nlink == 2
    assert stat.S_IMODE(spec.stat().st_mode) == 0o750 and os.getxattr(spec, "user.reviewed-by") == b"someone"
    assert sorted(p.name for p in (tmp_path / "pkg").iterdir()) == ["spec.py"]  # no temp file


def test_an_editor_save_landing_during_the_write_is_kept_and_reported(monkeypatch, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The window between the last comparison and the write: an editor's atomic save lands there. The save wins
    and the fixer says so (before, the fix's rename silently replaced it)."""
    from specguard import _files
    from specguard.cli import main

    (tmp_path / "a.py").write_text(SAFE)
    (tmp_path / "b.py").write_text(SAFE)
    saved = SAFE + "# saved by the editor while specguard wrote\n"
    real_write = _files._write_over

    def editor_saves_meanwhile(path, fd, old, new):  # type: ignore[no-untyped-def]
        real_write(path, fd, old, new)
        if str(path).endswith("a.py"):
            (tmp_path / ".a.py.swp").write_text(saved)
            os.replace(tmp_path / ".a.py.swp", tmp_path / "a.py")

    monkeypatch.setattr(_files, "_write_over", editor_saves_meanwhile)
    monkeypatch.chdir(tmp_path)
    main(["check", ".", "--fix", "--no-cache"])
    assert (tmp_path / "a.py").read_text() == saved and (tmp_path / "b.py").read_text() == SAFE_FIXED
    assert capsys.readouterr().err.splitlines() == [
        "specguard: warning: a.py: not fixed: conflict: another program replaced it while specguard wrote the fix; "
        "its version is kept"
    ]


def test_a_file_without_a_final_newline_is_fixed_and_keeps_its_last_byte(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 16 item 9, end to end: the override, last in its file, had no fix offered."""
    (tmp_path / "spec.py").write_text(SAFE.rstrip("\n"))
    out = cli("check", ".", "--fix", "--no-cache", cwd=tmp_path)
    assert (out.returncode, out.stderr) == (0, "")
    assert (tmp_path / "spec.py").read_text() == SAFE_FIXED.rstrip("\n")


@pytest.mark.parametrize("other", ["appends-meanwhile", "holds-a-lock", "holds-it-open"])
def test_another_program_writing_the_file_keeps_its_bytes_and_is_named(
    monkeypatch, tmp_path: Path, capsys, other: str
) -> None:  # type: ignore[no-untyped-def]
    """Issue 26 item 10, end to end: another program appends to a.py while --fix writes it (here where no lease can
    be had, just before the truncation's check), holds its advisory lock, or keeps it open for appending. a.py keeps
    its bytes and the reason is named; b.py is fixed."""
    import fcntl

    from specguard import _files
    from specguard.cli import main

    (tmp_path / "a.py").write_text(SAFE)
    (tmp_path / "b.py").write_text(SAFE)
    appended = "# a line another program appended\n"
    held = open(tmp_path / "a.py", "a")  # noqa: SIM115 - held across the run, as the other program holds it
    if other == "appends-meanwhile":
        held.close()
        monkeypatch.setattr(_files, "_LEASES", False)
        real = _files._shorten

        def append_then_shorten(path, *args):  # type: ignore[no-untyped-def]
            if str(path).endswith("a.py"):
                with open(tmp_path / "a.py", "a") as log:
                    log.write(appended)
            return real(path, *args)

        monkeypatch.setattr(_files, "_shorten", append_then_shorten)
        why = "conflict: another program appended to it while specguard wrote the fix; its version is kept"
    elif other == "holds-a-lock":
        fcntl.flock(held, fcntl.LOCK_EX)
        why = "it is locked by another program; left as it is"
    else:
        why = (
            "another program has it open (it may be writing to it), and the fix shortens it; close it and run "
            "specguard again"
        )
    monkeypatch.chdir(tmp_path)
    try:
        main(["check", ".", "--fix", "--no-cache"])
    finally:
        held.close()
    assert (tmp_path / "b.py").read_text() == SAFE_FIXED
    assert (tmp_path / "a.py").read_text() == SAFE + (appended if other == "appends-meanwhile" else "")
    assert capsys.readouterr().err.splitlines() == [f"specguard: warning: a.py: not fixed: {why}"]
