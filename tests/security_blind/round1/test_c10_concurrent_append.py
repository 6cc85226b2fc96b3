"""CLASS 10: another program writes to a file while `--fix` writes it (driven deterministically by an in-process
hook around os.write/os.pwrite/os.ftruncate/os.close/os.replace and open()). The other program's bytes must
not be lost silently: either they are in the file afterwards, or specguard reports a conflict naming it."""

from pathlib import Path

from sg1harness import (
    SG201_BAD,
    run_hooked,
    write,
)

APPEND = "\n# appended by the editor while specguard wrote\nEDITOR_MARK = 1\n"
EDITOR = SG201_BAD.replace("return cls(", "# the editor's own version\n        return cls(") + "\nEDITOR_SAVED = True\n"


def _project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    write(proj / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(proj / "pkg" / "__init__.py", "")
    write(proj / "pkg" / "kv.py", SG201_BAD)
    return proj


def _run(tmp_path, home, action, when, content=None):
    proj = _project(tmp_path)
    target = proj / "pkg" / "kv.py"
    hook = {
        "mode": "interfere",
        "target": str(target),
        "action": action,
        "when": when,
        "payload": APPEND,
        "content": content or "",
    }
    res = run_hooked(hook, ["check", "pkg", "--fix", "-n"], proj, home)
    assert res.report.get("fired"), (
        "attack could not be set up: the tool never wrote kv.py through a hooked call "
        f"(events={res.report.get('events')!r}, errors={res.report.get('errors')!r})\n{res.describe()}"
    )
    assert "Traceback (most recent call last)" not in res.err, res.describe()
    assert res.limit_hit is None, res.describe()
    final = target.read_bytes()
    conflict = [ln for ln in res.err.splitlines() if ln.startswith("specguard") and "kv.py" in ln]
    return res, final, conflict


def _assert_kept_or_reported(res, final: bytes, conflict, expected: bytes, what: str):
    kept = expected in final
    assert kept or (conflict and res.rc != 0), (
        f"the other program's {what} was lost silently: not in the file, and no conflict reported for kv.py "
        f"(rc={res.rc})\n--- final file ---\n{final.decode(errors='replace')}\n{res.describe()}"
    )


def test_append_right_after_first_write(tmp_path, home):
    """CLASS 10: --fix of kv.py (SG201); right after specguard's first write call on the file, another program appends lines through its own O_APPEND descriptor. EXPECT: the appended lines are in the final file, or specguard reports a conflict naming kv.py (non-zero exit); no traceback."""
    res, final, conflict = _run(tmp_path, home, "append", "after_first_write")
    _assert_kept_or_reported(res, final, conflict, APPEND.encode(), "appended lines")


def test_append_right_after_truncate(tmp_path, home):
    """CLASS 10: --fix of kv.py; right after specguard truncates the file to its new length (or at its close if it never truncates), another program appends through its own descriptor. EXPECT: the appended lines are in the final file, or a conflict naming kv.py is reported (non-zero exit)."""
    res, final, conflict = _run(tmp_path, home, "append", "after_truncate")
    _assert_kept_or_reported(res, final, conflict, APPEND.encode(), "appended lines")


def test_append_just_before_close(tmp_path, home):
    """CLASS 10: --fix of kv.py; after every write and truncate of specguard, just before it closes its descriptor, another program appends. EXPECT: the appended lines are in the final file, or a conflict naming kv.py is reported (non-zero exit)."""
    res, final, conflict = _run(tmp_path, home, "append", "at_close")
    _assert_kept_or_reported(res, final, conflict, APPEND.encode(), "appended lines")


def test_editor_rewrites_in_place_after_first_write(tmp_path, home):
    """CLASS 10: --fix of kv.py; right after specguard's first write, an editor saves its own version in place (O_TRUNC + write through its own descriptor). EXPECT: the final file is the editor's version, or a conflict naming kv.py is reported (non-zero exit)."""
    res, final, conflict = _run(tmp_path, home, "rewrite", "after_first_write", EDITOR)
    _assert_kept_or_reported(res, final, conflict, b"EDITOR_SAVED = True", "in-place save")
    if not conflict:
        assert final == EDITOR.encode(), (
            f"the editor's save was mixed with specguard's write:\n{final.decode(errors='replace')}"
        )


def test_editor_atomic_save_after_first_write(tmp_path, home):
    """CLASS 10: --fix of kv.py; right after specguard's first write, an editor saves atomically (writes kv.py.editor~ and renames it over kv.py). EXPECT: the final file is the editor's version, or a conflict naming kv.py is reported (non-zero exit)."""
    res, final, conflict = _run(tmp_path, home, "atomic", "after_first_write", EDITOR)
    _assert_kept_or_reported(res, final, conflict, b"EDITOR_SAVED = True", "atomic save")
    if not conflict:
        assert final == EDITOR.encode(), f"the editor's save was replaced:\n{final.decode(errors='replace')}"
