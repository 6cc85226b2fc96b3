"""Class 1: writes leaving the tree through a component swapped for a symlink between the check and the write."""

import os
import shutil

from sg2harness import (
    SG201_SRC,
    assert_no_crash,
    hook_events,
    make_project,
    run_cli,
    run_hooked,
    snapshot,
    write_tree,
)

# swap the folder PATH for a link to TARGET when specguard first opens a Python source for reading: after the
# arguments, settings and the walk, before any report, cache, baseline or fix is written
SWAP_AT_FIRST_READ = """
once = Once()
def before(path, flags, *a, **k):
    if fspath_str(path).endswith('.py') and not flags_write(flags) and once():
        swap_dir_for_link(PATH, TARGET)
        mark('swapped')
wrap(os, 'open', before)
"""


def swap_hook(path, target):
    return SWAP_AT_FIRST_READ.replace("PATH", repr(str(path))).replace("TARGET", repr(str(target)))


def victim_dir(work):
    v = work / "victim"
    write_tree(v, {"keep.txt": "victim data\n", "pkg/merge.py": SG201_SRC, "x/y/.keep": ""})
    return v


def test_root_swapped_for_link_cache_write(work):
    """CLASS 1: the tree's root (the current folder, checked as `.`) is swapped for a symlink to another folder after the walk and before the cache is written. EXPECT: nothing is created or changed in the link's target (the cache goes into the folder that was checked, or nowhere); no traceback."""
    root = make_project(work / "proj")
    victim = victim_dir(work)
    before = snapshot(victim)
    res = run_hooked(["check", ".", "--output-format", "json"], root, swap_hook(root, victim), work / "log")
    assert hook_events(work / "log") == ["swapped"], f"cannot set up: the swap did not happen: {res!r}"
    assert_no_crash(res, (1, 2))
    assert snapshot(victim) == before, f"specguard wrote into the swapped-in folder: {sorted(snapshot(victim))}"


def test_root_named_from_parent_swapped_fix(work):
    """CLASS 1: `specguard check proj --fix` run from proj's parent; `proj` is swapped for a symlink to another folder (the victim, holding the same files) after the walk. EXPECT: the victim's files are byte-for-byte unchanged and nothing is created in it; no traceback."""
    root = make_project(work / "proj")
    victim = victim_dir(work)
    before = snapshot(victim)
    res = run_hooked(["check", "proj", "--fix"], work, swap_hook(root, victim), work / "log")
    assert hook_events(work / "log") == ["swapped"], f"cannot set up: the swap did not happen: {res!r}"
    assert_no_crash(res, (0, 1, 2))
    assert snapshot(victim) == before, "specguard --fix or its cache wrote into the swapped-in folder"


def test_dotdot_component_swapped_fix(work):
    """CLASS 1: the path is given as `a/../pkg` (a relative path through `..`); after the walk `a` is swapped for a symlink to victim/x/y, so `a/..` now names victim/x, which holds its own pkg/merge.py. EXPECT: victim/x/pkg/merge.py unchanged and nothing created in the victim; no traceback."""
    root = make_project(work / "proj")
    (root / "a").mkdir()
    victim = work / "victim"
    write_tree(victim, {"x/pkg/merge.py": SG201_SRC, "x/y/.keep": ""})
    before = snapshot(victim)
    res = run_hooked(["check", "a/../pkg", "--fix"], root, swap_hook(root / "a", victim / "x" / "y"), work / "log")
    assert hook_events(work / "log") == ["swapped"], f"cannot set up: the swap did not happen: {res!r}"
    assert_no_crash(res, (0, 1, 2))
    assert snapshot(victim) == before, "the fix went through the swapped `..` component"


def test_output_file_folder_swapped(work):
    """CLASS 1: `-o reports/out.json`: the folder `reports` is swapped for a symlink to another user's folder after the check started. EXPECT: no file appears in (and nothing changes in) the link's target; no traceback."""
    root = make_project(work / "proj")
    (root / "reports").mkdir()
    victim = victim_dir(work)
    before = snapshot(victim)
    args = ["check", "pkg", "-o", "reports/out.json", "--output-format", "json"]
    res = run_hooked(args, root, swap_hook(root / "reports", victim), work / "log")
    assert hook_events(work / "log") == ["swapped"], f"cannot set up: the swap did not happen: {res!r}"
    assert_no_crash(res, (1, 2))
    assert snapshot(victim) == before, f"the report was written through the swapped folder: {sorted(snapshot(victim))}"


def test_write_baseline_folder_swapped(work):
    """CLASS 1: `--write-baseline state/base.json`: `state` is swapped for a symlink to another folder after the check started. EXPECT: nothing written or replaced in the link's target; no traceback."""
    root = make_project(work / "proj")
    (root / "state").mkdir()
    victim = victim_dir(work)
    (victim / "base.json").write_text("victim's own file\n")
    before = snapshot(victim)
    args = ["check", "pkg", "--write-baseline", "state/base.json"]
    res = run_hooked(args, root, swap_hook(root / "state", victim), work / "log")
    assert hook_events(work / "log") == ["swapped"], f"cannot set up: the swap did not happen: {res!r}"
    assert_no_crash(res, (0, 2))
    assert snapshot(victim) == before, "the baseline was written through the swapped folder"


def test_configured_cache_dir_parent_swapped(work):
    """CLASS 1: `cache-dir = "build/sgcache"` in the project's pyproject.toml; `build` (the folder above the cache) is swapped for a symlink to another folder after the walk. EXPECT: nothing is created in the link's target; no traceback."""
    root = make_project(work / "proj", {"pyproject.toml": '[tool.specguard]\ncache-dir = "build/sgcache"\n'})
    (root / "build").mkdir()
    victim = victim_dir(work)
    before = snapshot(victim)
    res = run_hooked(["check", "pkg", "--output-format", "json"], root, swap_hook(root / "build", victim), work / "log")
    assert hook_events(work / "log") == ["swapped"], f"cannot set up: the swap did not happen: {res!r}"
    assert_no_crash(res, (1, 2))
    assert snapshot(victim) == before, f"the cache went through the swapped folder: {sorted(snapshot(victim))}"


def test_cache_folder_swapped_after_mkdir(work):
    """CLASS 1: right after specguard creates a folder inside its cache (the version folder), the cache folder above it (`.specguard_cache`) is swapped for a symlink to another folder. EXPECT: no cache file lands in the link's target; no traceback."""
    root = make_project(work / "proj")
    victim = victim_dir(work)
    before = snapshot(victim)
    hook = """
once = Once()
def after(result, path, *a, **k):
    name = basename(path)
    inside = name != '.specguard_cache' and os.path.isdir(CACHE) and name in real.listdir(CACHE)
    if inside and once():
        swap_dir_for_link(CACHE, TARGET)
        mark('swapped')
wrap(os, 'mkdir', after=after)
""".replace("CACHE", repr(str(root / ".specguard_cache"))).replace("TARGET", repr(str(victim)))
    res = run_hooked(["check", "pkg", "--output-format", "json"], root, hook, work / "log")
    assert hook_events(work / "log") == ["swapped"], f"cannot set up: no folder was made inside the cache: {res!r}"
    assert_no_crash(res, (1, 2))
    assert snapshot(victim) == before, f"cache files went through the swapped folder: {sorted(snapshot(victim))}"


def test_clean_walk_subfolder_swapped(work):
    """CLASS 1: `specguard clean` walks the tree for `.specguard_cache` folders; the subfolder `sub` is swapped for a symlink to another user's project, which holds a genuine specguard cache, when clean first touches `sub`. EXPECT: the other project's cache is left in place, byte for byte; no traceback."""
    root = make_project(work / "proj")
    (root / "sub").mkdir()
    other = make_project(work / "other")
    r = run_cli(["check", "."], other)
    assert (other / ".specguard_cache").is_dir(), f"cannot set up: no cache made in the other project: {r!r}"
    before = snapshot(other)
    hook = """
once = Once()
def before(*args, **kwargs):
    for a in args:
        if isinstance(a, (str, bytes, os.PathLike)) and basename(a) == 'sub' and once():
            swap_dir_for_link(SUB, TARGET)
            mark('swapped')
for name in ('scandir', 'open', 'listdir', 'lstat', 'stat'):
    wrap(os, name, before)
""".replace("SUB", repr(str(root / "sub"))).replace("TARGET", repr(str(other)))
    res = run_hooked(["clean"], root, hook, work / "log")
    assert hook_events(work / "log") == ["swapped"], f"cannot set up: clean never touched `sub`: {res!r}"
    assert_no_crash(res, (0, 2))
    assert snapshot(other) == before, "clean removed or changed another project's files through the swapped folder"


def test_racing_thread_flips_folder_during_fix(work):
    """CLASS 1: a bounded racing thread inside the specguard process flips `pkg` between the real folder and a symlink to the victim's copy (same file names, same bad code) while `--fix` runs, over 8 runs. EXPECT: the victim's files are never changed; no traceback in any run."""
    root = make_project(work / "proj")
    victim = work / "victim"
    write_tree(victim, {"pkg/merge.py": SG201_SRC, "pkg/spec.py": (root / "pkg/spec.py").read_text()})
    before = snapshot(victim)
    hook = """
import threading
PKG, TARGET = PKGPATH, TARGETPATH
def flip():
    mark('started')
    for _ in range(20000):
        try:
            real.rename(PKG, PKG + '.real')
            real.symlink(TARGET, PKG)
            real.unlink(PKG)
            real.rename(PKG + '.real', PKG)
        except OSError:
            pass
once = Once()
def before(path, flags, *a, **k):
    # start racing once the walk is done: at the first read of a Python source
    if fspath_str(path).endswith('.py') and not flags_write(flags) and once():
        threading.Thread(target=flip, daemon=True).start()
wrap(os, 'open', before)
""".replace("PKGPATH", repr(str(root / "pkg"))).replace("TARGETPATH", repr(str(victim / "pkg")))
    for i in range(8):
        log = work / f"log{i}"
        res = run_hooked(["check", "pkg", "--fix", "-n"], root, hook, log)
        events = hook_events(log)
        assert events == ["started"], f"cannot set up: the racing thread did not start: {res!r}"
        assert "Traceback" not in res.stderr, res
        # put the real folder back if the run ended mid-flip
        if os.path.islink(root / "pkg"):
            os.unlink(root / "pkg")
        if os.path.isdir(str(root / "pkg") + ".real"):
            os.rename(str(root / "pkg") + ".real", root / "pkg")
        assert snapshot(victim) == before, f"run {i}: a fix landed in the victim's folder through the flipping link"
        (root / "pkg" / "merge.py").write_text(SG201_SRC)


def test_readonly_hardlink_out_of_tree_not_fixed(work):
    """CLASS 1: the fixable file is mode 0444 and a hard link to a file outside the tree (another name of the victim's file). EXPECT: `--fix` leaves both names byte-for-byte unchanged and the mode 0444 kept (a read-only file is not fixed; root's ability to write it is no licence); rc 1."""
    root = make_project(work / "proj")
    victim = work / "victim"
    victim.mkdir()
    target = root / "pkg" / "merge.py"
    os.chmod(target, 0o444)
    os.link(target, victim / "merge.py")
    res = run_cli(["check", "pkg", "--fix", "-n"], root)
    assert_no_crash(res, (1,))
    assert (victim / "merge.py").read_text() == SG201_SRC, (
        "the read-only file (and its hard link outside) was rewritten"
    )
    assert os.stat(target).st_mode & 0o777 == 0o444


def test_diff_root_swapped_from_parent(work):
    """CLASS 1: `specguard check proj --diff` (which writes nothing but its cache) from proj's parent; `proj` is swapped for a symlink to another folder after the walk. EXPECT: nothing created or changed in the link's target; no traceback."""
    root = make_project(work / "proj")
    victim = victim_dir(work)
    before = snapshot(victim)
    res = run_hooked(["check", "proj", "--diff"], work, swap_hook(root, victim), work / "log")
    assert hook_events(work / "log") == ["swapped"], f"cannot set up: the swap did not happen: {res!r}"
    assert_no_crash(res, (0, 1, 2))
    assert snapshot(victim) == before, (
        f"--diff (or its cache) wrote into the swapped-in folder: {sorted(snapshot(victim))}"
    )
    shutil.rmtree(str(root) + ".moved", ignore_errors=True)
