"""Discovery stays in the tree it was given (issue 26 item 4).

The tree is the real path of each folder named on the command line. A symlink in it that leads inside a tree is
followed (each folder once, so a loop ends); one that leads out of every tree is not followed, and one note names
it. A committed link to `/` used to walk the whole file system (minutes, gigabytes, findings in files outside the
tree). A file named on the command line is checked wherever it lies. Past a total budget of files and bytes the
walk stops: the files found are checked and reported, one error line says the rest was not, and the exit is 2.

Each run is a child under RLIMIT_AS (1 GiB) and RLIMIT_CPU: a walk over the file system dies there instead of
taking the machine; nothing is timed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.bounded import limits
from tests.test_cache import LEAF, tree

MEMORY = 1 << 30
CPU_SECONDS = 60
HANG_GUARD = 600  # only a blocked read reaches it


def _check(
    cwd: Path, *args: str, budget: tuple[int, int] | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`specguard check ARGS` in a bounded child; `budget` lowers discovery's (files, bytes) there, as only a
    test may."""
    lowered = "" if budget is None else f"discover.MAX_FILES, discover.MAX_BYTES = {budget!r}\n"
    code = (
        "from specguard.program import discover\n"
        f"{lowered}"
        "from specguard.cli import main\n"
        f"raise SystemExit(main(['check', *{list(args)!r}]))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        errors="replace",  # a walk out of the tree may print any file name
        env={**os.environ, "XDG_CACHE_HOME": str(cwd / "xdg"), **(env or {})},
        preexec_fn=limits(MEMORY, CPU_SECONDS),
        timeout=HANG_GUARD,
    )


JSON = ("--output-format", "json", "--no-cache")


def _expected(root: Path) -> subprocess.CompletedProcess:
    out = _check(root, "fork", *JSON)
    assert out.returncode == 1 and '"SG101"' in out.stdout and out.stderr == ""
    return out


def _note(*links: str) -> str:
    if len(links) == 1:
        return (
            f"specguard: note: 1 symlink leads out of the folders checked and was not followed: {links[0]}; name "
            "its target on the command line to check it\n"
        )
    return (
        f"specguard: note: {len(links)} symlinks lead out of the folders checked and were not followed: "
        f"{'; '.join(links)}; name a target on the command line to check it\n"
    )


def test_a_folder_link_to_the_root_of_the_file_system_is_not_walked(tmp_path: Path) -> None:
    root = tree(tmp_path, "DraftModelSpeculator")
    expected = _expected(root)
    (root / "fork" / "everything").symlink_to("/")
    (root / "fork" / "processes").symlink_to("/proc")
    out = _check(root, "fork", *JSON)
    assert (out.returncode, out.stdout) == (1, expected.stdout), out.stderr[-2000:]
    assert out.stderr == _note("fork/everything -> /", "fork/processes -> /proc")


def test_a_link_to_a_folder_outside_holding_a_finding_is_not_reported(tmp_path: Path) -> None:
    root = tree(tmp_path, "DraftModelSpeculator")
    expected = _expected(root)
    (tmp_path / "elsewhere").mkdir()
    outside = tree(tmp_path / "elsewhere", "DraftModelSpeculator").resolve()
    (root / "fork" / "vendored").symlink_to(outside / "fork")
    (root / "fork" / "one.py").symlink_to(outside / "fork" / "leaf.py")
    out = _check(root, "fork", *JSON)
    assert (out.returncode, out.stdout) == (1, expected.stdout)
    assert out.stderr == _note(f"fork/one.py -> {outside}/fork/leaf.py", f"fork/vendored -> {outside}/fork")
    # named on the command line, the target is checked wherever it lies, as before
    named = _check(root, "fork", str(outside / "fork"), *JSON)
    assert named.returncode == 1 and named.stdout.count('"SG101"') == 2 and named.stderr == ""


def test_special_files_named_py_are_named_in_a_note_and_never_read(tmp_path: Path) -> None:
    """A FIFO nobody writes would block a read; a link to /dev/zero would never end one. Neither is read, and
    neither is skipped silently (blind round 1 found the FIFO passed over without a word)."""
    root = tree(tmp_path, "DraftModelSpeculator")
    expected = _expected(root)
    os.mkfifo(root / "fork" / "pipe.py")
    (root / "fork" / "zero.py").symlink_to("/dev/zero")
    out = _check(root, "fork", *JSON)
    assert (out.returncode, out.stdout) == (1, expected.stdout)
    assert out.stderr == _note("fork/zero.py -> /dev/zero") + (
        "specguard: note: not regular files, so not read: fork/pipe.py (a FIFO)\n"
    )


def test_a_link_inside_the_tree_is_followed_once_and_a_loop_ends(tmp_path: Path) -> None:
    root = tree(tmp_path, "DraftModelSpeculator")
    (root / "fork" / "loop").symlink_to(".")  # fork/loop/loop/loop/... is fork again
    (root / "fork" / "sub").mkdir()
    (root / "fork" / "sub" / "up").symlink_to("../..")  # the folder holding fork: outside the tree `fork`
    (root / "fork" / "sub" / "back").symlink_to("..")  # fork itself: inside
    (root / "fork" / "sub" / "again.py").write_text(LEAF)
    (root / "fork" / "zalias").symlink_to("sub")  # sorted after sub: its files are found already
    files = _check(root, "fork", "--show-files")
    assert files.returncode == 0
    listed = [os.path.relpath(p, root) for p in files.stdout.split()]
    assert listed == ["fork/__init__.py", "fork/base.py", "fork/leaf.py", "fork/sub/again.py"]
    assert files.stderr == _note(f"fork/sub/up -> {root.resolve()}")
    out = _check(root, "fork", *JSON)
    assert out.returncode == 1 and out.stdout.count('"SG101"') == 2


def test_two_names_of_one_inode_are_two_files(tmp_path: Path) -> None:
    """A file is known by its real path, never by (device, inode): while an editor saves atomically, the inode a
    save frees is reused at once for the next file saved, which then passed for a file already reached and went
    unchecked, silently (CI saw `leaf2.py` lose its findings that way). Two hard links share an inode at one
    instant, which pins the same identity without a race: both names are checked, as ruff checks them."""
    root = tree(tmp_path, "DraftModelSpeculator")
    os.link(root / "fork" / "leaf.py", root / "fork" / "twin.py")
    files = _check(root, "fork", "--show-files")
    listed = [os.path.relpath(p, root) for p in files.stdout.split()]
    assert listed == ["fork/__init__.py", "fork/base.py", "fork/leaf.py", "fork/twin.py"]
    out = _check(root, "fork", *JSON)
    assert out.returncode == 1 and out.stdout.count('"SG101"') == 2


def test_the_installed_vllm_is_a_tree_of_its_own(tmp_path: Path) -> None:
    """`--vllm` adds the installed vLLM (located, never imported) as a folder named on the command line: its own
    tree, walked whole, and a link out of it is not followed."""
    root = tree(tmp_path, "DraftModelSpeculator")
    site = tmp_path / "site"
    (site / "vllm" / "v1").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("raise RuntimeError('specguard must not import vLLM')\n")
    (site / "vllm" / "v1" / "spec.py").write_text("x = 1\n")
    (site / "vllm" / "v1" / "everything").symlink_to("/")
    out = _check(
        root, "fork", "--vllm", "--show-files", env={"PYTHONPATH": f"{site}:{os.environ.get('PYTHONPATH', '')}"}
    )
    assert out.returncode == 0, out.stderr
    listed = [os.path.relpath(p, tmp_path) for p in out.stdout.split()]
    assert listed == [
        "fork/__init__.py",
        "fork/base.py",
        "fork/leaf.py",
        "site/vllm/__init__.py",
        "site/vllm/v1/spec.py",
    ]
    assert out.stderr == _note(f"{site}/vllm/v1/everything -> /")


def test_past_the_budget_the_files_found_are_reported_and_the_rest_is_an_error(tmp_path: Path) -> None:
    root = tree(tmp_path, "DraftModelSpeculator")
    expected = _expected(root)
    (root / "more").mkdir()
    (root / "more" / "late.py").write_text("x = 1\n")
    message = (
        "specguard: error: the folders checked hold more than one run reads ({}): the files found before "
        "more/late.py were checked and the rest were not; check fewer folders per run\n"
    )
    by_files = _check(root, "fork", "more", *JSON, budget=(3, 1 << 30))
    assert (by_files.returncode, by_files.stdout) == (2, expected.stdout)
    assert by_files.stderr == message.format("3 Python files")
    size = sum(p.stat().st_size for p in (root / "fork").iterdir())
    by_bytes = _check(root, "fork", "more", *JSON, budget=(100, size + 3))
    assert (by_bytes.returncode, by_bytes.stdout) == (2, expected.stdout)
    assert by_bytes.stderr == message.format(f"{size + 3:,} bytes of Python")
    within = _check(root, "fork", "more", *JSON, budget=(4, size + 6))
    assert (within.returncode, within.stdout, within.stderr) == (1, expected.stdout, "")


def _nested(base: Path, depth: int, leaf: bytes) -> None:
    """`depth` folders `d` one in the other under `base`, made beneath open folders (the path may pass PATH_MAX)."""
    fds = [os.open(base, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fds[-1])
            fds.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
        fd = os.open("leaf.py", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fds[-1])
        os.write(fd, leaf)
        os.close(fd)
    finally:
        for fd in fds:
            os.close(fd)


def _remove_nested(base: Path) -> None:
    """Remove what `_nested` made, deepest first, beneath open folders (no path, no recursion)."""
    fds = [os.open(base, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        while "d" in os.listdir(fds[-1]):
            fds.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
        while True:
            for name in os.listdir(fds[-1]):
                os.unlink(name, dir_fd=fds[-1])
            if len(fds) == 1:
                break
            os.close(fds.pop())
            os.rmdir("d", dir_fd=fds[-1])
    finally:
        for fd in fds:
            os.close(fd)


def test_a_tree_deeper_than_the_cap_is_walked_to_the_cap_and_named_in_one_note(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from specguard.program import discover

    monkeypatch.setattr(discover, "MAX_DEPTH", 3)
    _nested(tmp_path, 3, b"")  # d/d/d/leaf.py: three folders below the one named, at the cap
    _nested(tmp_path / "d" / "d" / "d", 2, b"")  # d/d/d/d/d/leaf.py: past it
    found = discover.discover([tmp_path], root=tmp_path)
    assert [os.path.relpath(f, tmp_path) for f in found.files] == ["d/d/d/leaf.py"]
    assert found.notes == [
        f"folders not walked: {tmp_path}/d/d/d/d (deeper than 3 folders); name a folder nearer to them to check "
        "what they hold"
    ]
    assert not found.errors


def test_nesting_past_the_recursion_limit_is_walked_without_a_recursion_error(tmp_path: Path) -> None:
    """1,100 nested folders (Python's recursion limit is 1,000): the walk is iterative and stops at its cap, one
    note; the rest of the tree is checked."""
    root = tree(tmp_path, "DraftModelSpeculator")
    (root / "deep").mkdir()
    try:
        _nested(root / "deep", 1_100, LEAF.encode())
        out = _check(root, "fork", "deep", "--no-cache")
    finally:  # pytest's own clean-up of old temporary folders is recursive: it must never meet this tree
        _remove_nested(root / "deep")
    assert "RecursionError" not in out.stderr and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.returncode == 1 and "fork/leaf.py:" in out.stdout, out.stdout + out.stderr[-2000:]
    (note,) = [line for line in out.stderr.splitlines() if "not walked" in line]
    assert note.startswith("specguard: note: folders not walked: deep/d/d/") and "(deeper than 256 folders)" in note


def test_clean_walks_a_tree_past_the_recursion_limit(tmp_path: Path) -> None:
    """`specguard clean` finds cache folders with an iterative walk too: 1,100 nested folders are no RecursionError
    (os.walk recurses), and the cache beside them is removed."""
    from specguard.analysis.cache_clean import cache_folders

    (tmp_path / "a" / ".specguard_cache").mkdir(parents=True)
    (tmp_path / "deep").mkdir()
    try:
        _nested(tmp_path / "deep", 1_100, b"")
        assert list(cache_folders(tmp_path)) == [tmp_path / "a" / ".specguard_cache"]
    finally:
        _remove_nested(tmp_path / "deep")
