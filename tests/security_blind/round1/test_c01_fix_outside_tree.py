"""CLASS 1: writes (`--fix`, `--write-baseline`, the cache, `specguard clean`) leaving the tree when a folder
component of the written path is swapped for a symlink to an out-of-tree copy between the check and the write."""

from pathlib import Path

from sg1harness import (
    SG101_BAD,
    SG201_BAD,
    assert_sane,
    copy_tree,
    diff_snapshots,
    run_cli,
    run_hooked,
    snapshot,
    write,
)


def _project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    write(proj / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(proj / "pkg" / "__init__.py", "")
    write(proj / "pkg" / "sub" / "__init__.py", "")
    write(proj / "pkg" / "sub" / "deep" / "__init__.py", "")
    write(proj / "pkg" / "sub" / "deep" / "kv.py", SG201_BAD)
    write(proj / "pkg" / "sub" / "deep" / "notes.txt", "keep me\n")
    return proj


def _swap_setup(tmp_path: Path, watch: Path):
    """An out-of-tree copy of `watch`, and a place to move the real folder aside."""
    outside = copy_tree(watch, tmp_path / "elsewhere" / watch.name)
    aside = tmp_path / "aside" / watch.name
    aside.parent.mkdir(parents=True, exist_ok=True)
    return outside, aside


def _assert_fired(res):
    assert res.report.get("fired"), (
        "attack could not be set up: the tool never did the operation the hook waits for "
        f"(events={res.report.get('events')!r}, errors={res.report.get('errors')!r})\n{res.describe()}"
    )


def _assert_outside_unchanged(before, outside, res):
    after = snapshot(outside)
    diff = diff_snapshots(before, after)
    assert not diff, (
        f"the out-of-tree copy {outside} was changed through the swapped link: {diff[:10]!r}\n{res.describe()}"
    )


def test_fix_parent_folder_swapped_at_write_open(tmp_path, home):
    """CLASS 1: --fix; the fixed file's own folder (pkg/sub/deep) becomes a symlink to an out-of-tree copy the moment the file is opened for writing (os.open/open hook). EXPECT: the out-of-tree copy is byte-identical afterwards, exit 0/1, no traceback."""
    proj = _project(tmp_path)
    watch = proj / "pkg" / "sub" / "deep"
    outside, aside = _swap_setup(tmp_path, watch)
    before = snapshot(outside)
    hook = {
        "mode": "swap",
        "kind": "write",
        "watch": str(watch),
        "outside": str(outside),
        "aside": str(aside),
        "trigger": [str(watch)],
    }
    res = run_hooked(hook, ["check", "pkg", "--fix", "-n"], proj, home)
    _assert_fired(res)
    _assert_outside_unchanged(before, outside, res)
    assert_sane(res)


def test_fix_middle_component_swapped_at_write_open(tmp_path, home):
    """CLASS 1: --fix; a middle folder component (pkg, two levels above the fixed file) becomes a symlink to an out-of-tree copy of pkg when the file is opened for writing. EXPECT: the out-of-tree copy is byte-identical afterwards, no traceback."""
    proj = _project(tmp_path)
    watch = proj / "pkg"
    outside, aside = _swap_setup(tmp_path, watch)
    before = snapshot(outside)
    hook = {
        "mode": "swap",
        "kind": "write",
        "watch": str(watch),
        "outside": str(outside),
        "aside": str(aside),
        "trigger": [str(watch)],
    }
    res = run_hooked(hook, ["check", "pkg", "--fix", "-n"], proj, home)
    _assert_fired(res)
    _assert_outside_unchanged(before, outside, res)
    assert_sane(res)


def test_fix_file_named_on_command_line_parent_swapped(tmp_path, home):
    """CLASS 1: --fix on a file named directly on the command line (pkg/sub/deep/kv.py, as pre-commit passes it); pkg/sub is swapped for a symlink to an out-of-tree copy at the write. EXPECT: the out-of-tree copy is byte-identical afterwards, no traceback."""
    proj = _project(tmp_path)
    watch = proj / "pkg" / "sub"
    outside, aside = _swap_setup(tmp_path, watch)
    before = snapshot(outside)
    hook = {
        "mode": "swap",
        "kind": "write",
        "watch": str(watch),
        "outside": str(outside),
        "aside": str(aside),
        "trigger": [str(watch)],
    }
    res = run_hooked(hook, ["check", "pkg/sub/deep/kv.py", "--fix", "-n", "--force-exclude"], proj, home)
    _assert_fired(res)
    _assert_outside_unchanged(before, outside, res)
    assert_sane(res)


def test_fix_second_file_write_after_first_succeeded(tmp_path, home):
    """CLASS 1: --fix of two files in one folder; the folder is swapped only at the SECOND file's write (the first write went in normally), so a per-folder check done once cannot cover it. EXPECT: the out-of-tree copy is byte-identical afterwards, no traceback."""
    proj = _project(tmp_path)
    write(proj / "pkg" / "sub" / "deep" / "kv2.py", SG201_BAD.replace("MLAAttentionSpec", "OtherMLAAttentionSpec"))
    watch = proj / "pkg" / "sub" / "deep"
    outside, aside = _swap_setup(tmp_path, watch)
    before = snapshot(outside)
    hook = {
        "mode": "swap",
        "kind": "write",
        "watch": str(watch),
        "outside": str(outside),
        "aside": str(aside),
        "trigger": [str(watch / "kv.py"), str(watch / "kv2.py")],
        "nth": 2,
    }
    res = run_hooked(hook, ["check", "pkg", "--fix", "-n"], proj, home)
    _assert_fired(res)
    _assert_outside_unchanged(before, outside, res)
    assert_sane(res)


def test_fix_racing_thread_flips_folder(tmp_path, home):
    """CLASS 1: --fix while a racing thread flips pkg/sub/deep between the real folder and a symlink to an out-of-tree copy (bounded: 3 runs, at most 200k flips each). EXPECT: the out-of-tree copy is byte-identical after every run, no traceback."""
    proj = _project(tmp_path)
    watch = proj / "pkg" / "sub" / "deep"
    outside, aside = _swap_setup(tmp_path, watch)
    before = snapshot(outside)
    for i in range(3):
        write(watch / "kv.py", SG201_BAD)
        hook = {"mode": "race", "watch": str(watch), "outside": str(outside), "aside": str(aside), "flips": 200000}
        res = run_hooked(hook, ["check", "pkg", "--fix", "-n"], proj, home)
        _assert_fired(res)
        _assert_outside_unchanged(before, outside, res)
        assert "Traceback (most recent call last)" not in res.err, res.describe()
        assert res.limit_hit is None, res.describe()


def test_write_baseline_folder_swapped(tmp_path, home):
    """CLASS 1: --write-baseline out/base.json inside the tree; the folder out/ is swapped for a symlink to an out-of-tree copy when the baseline is opened for writing. EXPECT: the out-of-tree copy is byte-identical afterwards, no traceback."""
    proj = _project(tmp_path)
    write(proj / "pkg" / "a.py", SG101_BAD)
    watch = proj / "out"
    write(watch / "README", "baselines live here\n")
    outside, aside = _swap_setup(tmp_path, watch)
    before = snapshot(outside)
    hook = {
        "mode": "swap",
        "kind": "write",
        "watch": str(watch),
        "outside": str(outside),
        "aside": str(aside),
        "trigger": [str(watch)],
    }
    res = run_hooked(hook, ["check", "pkg", "-n", "--write-baseline", "out/base.json"], proj, home)
    _assert_fired(res)
    _assert_outside_unchanged(before, outside, res)
    assert "Traceback (most recent call last)" not in res.err, res.describe()
    assert res.limit_hit is None, res.describe()


def test_configured_cache_dir_parent_swapped(tmp_path, home):
    """CLASS 1: cache-dir = "build/sgcache" in the project's pyproject.toml; on the cold run the folder build/ is swapped for a symlink to an out-of-tree copy when the cache is first created/written. EXPECT: the out-of-tree copy is byte-identical afterwards (no cache written through the link), findings still reported (exit 1)."""
    proj = _project(tmp_path)
    write(proj / "pyproject.toml", '[tool.specguard]\ncache-dir = "build/sgcache"\n')
    write(proj / "pkg" / "a.py", SG101_BAD)
    watch = proj / "build"
    write(watch / "keep.txt", "build output\n")
    outside, aside = _swap_setup(tmp_path, watch)
    before = snapshot(outside)
    hook = {
        "mode": "swap",
        "kind": "write",
        "watch": str(watch),
        "outside": str(outside),
        "aside": str(aside),
        "trigger": [str(watch)],
    }
    res = run_hooked(hook, ["check", "pkg"], proj, home)
    _assert_fired(res)
    _assert_outside_unchanged(before, outside, res)
    assert_sane(res, rcs=(1,))


def test_default_cache_folder_swapped_on_warm_run(tmp_path, home):
    """CLASS 1: a warm run (the .specguard_cache folder exists) after a new file was added; .specguard_cache itself is swapped for a symlink to an out-of-tree copy when the cache is written. EXPECT: the out-of-tree copy is byte-identical afterwards, findings still reported (exit 1)."""
    proj = _project(tmp_path)
    write(proj / "pkg" / "a.py", SG101_BAD)
    first = run_cli(["check", "pkg"], proj, home)
    assert first.rc == 1, first.describe()
    watch = proj / ".specguard_cache"
    assert watch.is_dir(), f"cannot set up the attack: no {watch} after a cold run\n{first.describe()}"
    write(proj / "pkg" / "b.py", SG101_BAD.replace("MyDraftSpeculator", "OtherDraftSpeculator"))
    outside, aside = _swap_setup(tmp_path, watch)
    before = snapshot(outside)
    hook = {
        "mode": "swap",
        "kind": "write",
        "watch": str(watch),
        "outside": str(outside),
        "aside": str(aside),
        "trigger": [str(watch)],
    }
    res = run_hooked(hook, ["check", "pkg"], proj, home)
    _assert_fired(res)
    _assert_outside_unchanged(before, outside, res)
    assert_sane(res, rcs=(1,))


def _clean_setup(tmp_path, home):
    proj = tmp_path / "proj"
    sub = proj / "sub"
    write(sub / "pkg" / "a.py", SG101_BAD)
    first = run_cli(["check", "pkg"], sub, home)
    assert first.rc == 1, first.describe()
    assert (sub / ".specguard_cache").is_dir(), f"cannot set up the attack: no cache in {sub}\n{first.describe()}"
    return proj, sub


def test_clean_parent_of_cache_swapped(tmp_path, home):
    """CLASS 1: `specguard clean` from proj/; when it first touches sub/.specguard_cache, the folder sub/ is swapped for a symlink to an out-of-tree copy (holding its own .specguard_cache). EXPECT: the out-of-tree copy, its cache included, is byte-identical afterwards, no traceback."""
    proj, sub = _clean_setup(tmp_path, home)
    outside, aside = _swap_setup(tmp_path, sub)
    before = snapshot(outside)
    hook = {
        "mode": "swap",
        "kind": "clean",
        "watch": str(sub),
        "outside": str(outside),
        "aside": str(aside),
        "trigger": [str(sub)],
    }
    res = run_hooked(hook, ["clean"], proj, home)
    _assert_fired(res)
    _assert_outside_unchanged(before, outside, res)
    assert_sane(res, rcs=(0, 1, 2))


def test_clean_cache_folder_itself_swapped(tmp_path, home):
    """CLASS 1: `specguard clean`; sub/.specguard_cache itself is swapped for a symlink to an out-of-tree copy of that cache when clean first touches it. EXPECT: the out-of-tree cache copy is byte-identical afterwards, no traceback."""
    proj, sub = _clean_setup(tmp_path, home)
    watch = sub / ".specguard_cache"
    outside, aside = _swap_setup(tmp_path, watch)
    before = snapshot(outside)
    hook = {
        "mode": "swap",
        "kind": "clean",
        "watch": str(watch),
        "outside": str(outside),
        "aside": str(aside),
        "trigger": [str(watch)],
    }
    res = run_hooked(hook, ["clean"], proj, home)
    _assert_fired(res)
    _assert_outside_unchanged(before, outside, res)
    assert_sane(res, rcs=(0, 1, 2))


def test_clean_configured_cache_dir_parent_swapped(tmp_path, home):
    """CLASS 1: `specguard clean` with cache-dir = "build/c" (inside the project); build/ is swapped for a symlink to an out-of-tree copy (holding a cache of the same shape) when clean first touches build/. EXPECT: the out-of-tree copy is byte-identical afterwards, no traceback."""
    proj = tmp_path / "proj"
    write(proj / "pyproject.toml", '[tool.specguard]\ncache-dir = "build/c"\n')
    write(proj / "pkg" / "a.py", SG101_BAD)
    first = run_cli(["check", "pkg"], proj, home)
    assert first.rc == 1, first.describe()
    watch = proj / "build"
    assert (watch / "c").is_dir(), f"cannot set up the attack: no configured cache at {watch / 'c'}\n{first.describe()}"
    outside, aside = _swap_setup(tmp_path, watch)
    before = snapshot(outside)
    hook = {
        "mode": "swap",
        "kind": "clean",
        "any_path": True,
        "watch": str(watch),
        "outside": str(outside),
        "aside": str(aside),
        "trigger": [str(watch)],
    }
    res = run_hooked(hook, ["clean"], proj, home)
    _assert_fired(res)
    _assert_outside_unchanged(before, outside, res)
    assert_sane(res, rcs=(0, 1, 2))
