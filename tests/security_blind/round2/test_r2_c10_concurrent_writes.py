"""Class 10: another program writes (appends, truncates, overwrites, saves through rename, holds a lock on) the
file while `--fix` writes it: deterministic hooks around specguard's own write calls."""

import fcntl
import os
import subprocess
import sys
import textwrap

from sg2harness import (
    SG201_SRC,
    assert_no_crash,
    hook_events,
    make_project,
    run_hooked,
)

SG102_SRC = textwrap.dedent(
    """\
    from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

    class MyDFlashSpeculator(DraftModelSpeculator):
        def _build_draft_attn_metadata(self, num_reqs, num_reqs_padded, num_tokens_padded, **kwargs):
            return super()._build_draft_attn_metadata(num_reqs, num_reqs_padded, num_tokens_padded, **kwargs)
    """
)

# runs ACTION(path) once, right before specguard's first CALL (os.write / os.pwrite / os.ftruncate) on the file
BEFORE_CALL = """
TARGET = TARGETPATH
once = Once()
def is_target(fd):
    try:
        return os.readlink('/proc/self/fd/%d' % fd).split(' (deleted)')[0] == TARGET
    except OSError:
        return False
def action(path):
ACTIONBODY
def before(fd, *a, **k):
    if is_target(fd) and once():
        action(TARGET)
        mark('done')
for name in CALLS:
    wrap(os, name, before)
"""


def hook(target, body, calls=("write", "pwrite")):
    return (
        BEFORE_CALL.replace("TARGETPATH", repr(str(target)))
        .replace("ACTIONBODY", textwrap.indent(textwrap.dedent(body), "    "))
        .replace("CALLS", repr(tuple(calls)))
    )


def run_fix(work, root, hook_src, *extra):
    res = run_hooked(["check", "pkg", "--fix", "-n", *extra], root, hook_src, work / "log")
    assert hook_events(work / "log") == ["done"], f"cannot set up: specguard never wrote the file: {res!r}"
    assert_no_crash(res, (0, 1))
    return res


def test_append_while_fix_writes(work):
    """CLASS 10: right before specguard's first write to the file it fixes, another program appends `APPENDED_BY_OTHER = 1` (O_APPEND). EXPECT: the appended line is in the file afterwards, which still compiles; no traceback."""
    root = make_project(work / "proj")
    target = root / "pkg" / "merge.py"
    body = """\
    fd = real.open(path, os.O_WRONLY | os.O_APPEND)
    real.write(fd, b"\\nAPPENDED_BY_OTHER = 1\\n")
    real.close(fd)
    """
    run_fix(work, root, hook(target, body))
    data = target.read_bytes()
    assert b"APPENDED_BY_OTHER = 1" in data, f"the other program's append was overwritten:\n{data.decode()}"
    compile(data, "merge.py", "exec")


def test_truncate_while_fix_writes(work):
    """CLASS 10: right before specguard's first write, another program truncates the file to 0 bytes (its new version: empty). EXPECT: the other program's version is kept: the file is empty afterwards, and a conflict is reported; no traceback."""
    root = make_project(work / "proj")
    target = root / "pkg" / "merge.py"
    res = run_fix(work, root, hook(target, "os.truncate(path, 0)\n"))
    assert target.read_bytes() == b"", f"the truncation was overwritten:\n{target.read_text()}"
    assert "merge.py" in res.stderr, f"no line names the conflict: {res!r}"


def test_same_size_overwrite_while_fix_writes(work):
    """CLASS 10: right before specguard's first write, another program rewrites the file in place with a same-size version (`bool = False` -> `bool = Frue`, a different program text). EXPECT: the other program's version is kept byte for byte; a line names the file; no traceback."""
    root = make_project(work / "proj")
    target = root / "pkg" / "merge.py"
    other = SG201_SRC.replace("bool = False", "bool = Frue ").encode()
    assert len(other) == len(SG201_SRC.encode())
    body = f"""\
    fd = real.open(path, os.O_WRONLY)
    real.pwrite(fd, {other!r}, 0)
    real.close(fd)
    """
    res = run_fix(work, root, hook(target, body))
    assert target.read_bytes() == other, f"the other program's write was overwritten:\n{target.read_text()}"
    assert "merge.py" in res.stderr, f"no line names the conflict: {res!r}"


def test_editor_rename_save_while_fix_writes(work):
    """CLASS 10: right before specguard's first write, an editor saves the file the usual way (write `merge.py.swp`, rename it over `merge.py`). EXPECT: `merge.py` holds the editor's text afterwards; no stray temporary file is left in the folder; no traceback."""
    root = make_project(work / "proj")
    target = root / "pkg" / "merge.py"
    editor = b"# saved by the editor\n" + SG201_SRC.encode()
    body = f"""\
    write_file(path + '.swp', {editor!r})
    real.rename(path + '.swp', path)
    """
    run_fix(work, root, hook(target, body))
    assert target.read_bytes() == editor, f"the editor's save was lost:\n{target.read_text()}"
    assert sorted(os.listdir(root / "pkg")) == ["merge.py", "pad.py", "spec.py"], os.listdir(root / "pkg")


def test_editor_rename_save_lands_mid_write(work):
    """CLASS 10: an editor's save through rename lands right after specguard's first write call to the file (mid-write). EXPECT: `merge.py` holds the editor's text afterwards; no traceback."""
    root = make_project(work / "proj")
    target = root / "pkg" / "merge.py"
    editor = b"# saved by the editor, mid-write\n" + SG201_SRC.encode()
    src = f"""
TARGET = {str(target)!r}
once = Once()
def after(result, fd, *a, **k):
    try:
        mine = os.readlink('/proc/self/fd/%d' % fd).split(' (deleted)')[0] == TARGET
    except OSError:
        mine = False
    if mine and once():
        write_file(TARGET + '.swp', {editor!r})
        real.rename(TARGET + '.swp', TARGET)
        mark('done')
wrap(os, 'write', after=after)
wrap(os, 'pwrite', after=after)
"""
    run_fix(work, root, src)
    assert target.read_bytes() == editor, f"the editor's save was lost:\n{target.read_text()}"


def test_append_before_shrinking_truncate(work):
    """CLASS 10: an unsafe fix that shrinks the file (SG102's deletion, `--unsafe-fixes`): right before specguard's ftruncate, another program appends `APPENDED_BY_OTHER = 2`. EXPECT: the appended line survives; no traceback."""
    root = make_project(work / "proj", {"pkg/dflash.py": SG102_SRC})
    target = root / "pkg" / "dflash.py"
    body = """\
    fd = real.open(path, os.O_WRONLY | os.O_APPEND)
    real.write(fd, b"\\nAPPENDED_BY_OTHER = 2\\n")
    real.close(fd)
    """
    run_fix(work, root, hook(target, body, calls=("ftruncate",)), "--unsafe-fixes")
    data = target.read_bytes()
    assert b"APPENDED_BY_OTHER = 2" in data, f"the append was cut off by the shrinking fix:\n{data.decode()}"


def test_change_between_check_and_fix(work):
    """CLASS 10: after specguard has read the file for the check and before it opens it again to fix it, another program rewrites it with a different same-size text and puts the old mtime back. EXPECT: the file is left as the other program wrote it, with one line naming it; no traceback."""
    root = make_project(work / "proj")
    target = root / "pkg" / "merge.py"
    other = SG201_SRC.replace("bool = False", "bool = Frue ").encode()
    src = f"""
TARGET = {str(target)!r}
seen = [0]
def before(path, *a, **k):
    if basename(path) == 'merge.py':
        seen[0] += 1
        if seen[0] == 2:
            st = real.stat(TARGET)
            fd = real.open(TARGET, os.O_WRONLY)
            real.pwrite(fd, {other!r}, 0)
            real.close(fd)
            real.utime(TARGET, ns=(st.st_atime_ns, st.st_mtime_ns))
            mark('done')
wrap(os, 'open', before)
"""
    res = run_fix(work, root, src)
    assert target.read_bytes() == other, f"the other program's version was overwritten:\n{target.read_text()}"
    assert "merge.py" in res.stderr, f"no line names the changed file: {res!r}"


def test_flock_held_by_another_process(work):
    """CLASS 10: another process holds an exclusive `flock` on the file for the whole run. EXPECT: specguard does not write it (bytes unchanged), ends on its own (no hang) with a line naming the file, rc 1; no traceback."""
    root = make_project(work / "proj")
    target = root / "pkg" / "merge.py"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time\n"
            f"f = open({str(target)!r}, 'rb')\n"
            "fcntl.flock(f, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline().strip() == b"locked", "cannot set up: the lock holder did not lock"
        with open(target, "rb") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                raise AssertionError("cannot set up: the file is not locked")
            except BlockingIOError:
                pass
        src = "mark('done')\n"
        res = run_hooked(["check", "pkg", "--fix", "-n"], root, src, work / "log")
        assert_no_crash(res, (1,))
        assert target.read_text() == SG201_SRC, "specguard wrote a file another program holds locked"
        assert "merge.py" in res.stderr, f"no line names the locked file: {res!r}"
    finally:
        holder.kill()
        holder.wait()
