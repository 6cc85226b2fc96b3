"""Class 2: caches and per-user caches planted or altered by another local user (simulated with chown to 65534
and mode bits), symlinks in the cache path, hard links to a victim's files, `--cache-dir` in a shared folder.

A cache that hides findings is built the way another user could build one: specguard is run on files of the same
size and mtime whose text names nothing a rule matches, then the real (bad) text is put back with that mtime.
"""

import os
import shutil

from sg2harness import (
    DSPARK_CODES,
    DSPARK_DCP_YAML,
    GOOD_FILES,
    OTHER_GID,
    OTHER_UID,
    assert_good_findings,
    assert_no_crash,
    chown_tree,
    config_codes,
    copy_vllm,
    make_project,
    run_cli,
    snapshot,
)

T_OLD = 946684800  # 2000-01-01: far from "within two seconds of the file's last change"


def blank_same_size(path):
    data = path.read_bytes()
    path.write_bytes(b"#" * (len(data) - 1) + b"\n")
    os.utime(path, (T_OLD, T_OLD))
    return data


def poisoned_project(root, extra_args=()):
    """Make the project's cache (as the same user) from blanked files, then put the bad files back with the same
    size and mtime: a cache that, if trusted, hides all three findings."""
    saved = {rel: blank_same_size(root / rel) for rel in GOOD_FILES}
    r = run_cli(["check", "pkg", *extra_args], root)
    assert r.rc == 0, f"cannot set up: the blanked tree has findings: {r!r}"
    for rel, data in saved.items():
        (root / rel).write_bytes(data)
        os.utime(root / rel, (T_OLD, T_OLD))


def assert_cache_named(res):
    assert "cache" in res.stderr.lower(), f"no note or warning says a cache was ignored: {res!r}"


def test_project_cache_owned_by_other_user(work):
    """CLASS 2: the project's `.specguard_cache` (folder and files) belongs to another user and hides every finding. EXPECT: it is ignored: the three findings are reported (rc 1) and a note/warning names the cache; the planted files are left unchanged."""
    root = make_project(work / "proj")
    poisoned_project(root)
    chown_tree(root / ".specguard_cache")
    planted = snapshot(root / ".specguard_cache")
    res = run_cli(["check", "pkg", "--output-format", "json"], root)
    assert_good_findings(res, root)
    assert_cache_named(res)
    assert snapshot(root / ".specguard_cache") == planted, "specguard wrote into another user's cache folder"


def test_project_cache_files_world_writable(work):
    """CLASS 2: the project's cache is ours, but its version folder and files were left mode 0777/0666 (anyone could have rewritten them) and they hide every finding. EXPECT: the three findings are reported (rc 1) with a note naming the cache."""
    root = make_project(work / "proj")
    poisoned_project(root)
    for dirpath, dirnames, filenames in os.walk(root / ".specguard_cache"):
        for d in dirnames:
            os.chmod(os.path.join(dirpath, d), 0o777)
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), 0o666)
    res = run_cli(["check", "pkg", "--output-format", "json"], root)
    assert_good_findings(res, root)
    assert_cache_named(res)


def test_project_cache_folder_writable_by_others(work):
    """CLASS 2: `.specguard_cache` itself is ours with mode 0777 and no sticky bit (another user could swap what is inside); its content hides every finding. EXPECT: the three findings are reported (rc 1) with a note naming the cache."""
    root = make_project(work / "proj")
    poisoned_project(root)
    os.chmod(root / ".specguard_cache", 0o777)
    res = run_cli(["check", "pkg", "--output-format", "json"], root)
    assert_good_findings(res, root)
    assert_cache_named(res)


def test_cache_symlink_planted_by_other_user(work):
    """CLASS 2: `.specguard_cache` is a symlink another user made (lchown 65534) to a folder holding a cache that hides every finding. EXPECT: the findings are reported (rc 1) and nothing is written through the link (its target unchanged)."""
    root = make_project(work / "proj")
    poisoned_project(root)
    elsewhere = work / "elsewhere"
    shutil.move(str(root / ".specguard_cache"), elsewhere)
    os.symlink(elsewhere, root / ".specguard_cache")
    os.lchown(root / ".specguard_cache", OTHER_UID, OTHER_GID)
    before = snapshot(elsewhere)
    res = run_cli(["check", "pkg", "--output-format", "json"], root)
    assert_good_findings(res, root)
    assert snapshot(elsewhere) == before, "specguard wrote through a cache link another user planted"


def test_cache_dir_in_sticky_shared_folder_planted(work):
    """CLASS 2: `--cache-dir shared/sg` where `shared` is a sticky world-writable folder (like /tmp) and `sg` was created first by another user, holding a cache that hides every finding. EXPECT: the findings are reported (rc 1), a note names the cache, and the other user's folder is left unchanged."""
    root = make_project(work / "proj")
    shared = work / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    poisoned_project(root, ["--cache-dir", str(shared / "sg")])
    chown_tree(shared / "sg")
    planted = snapshot(shared / "sg")
    res = run_cli(["check", "pkg", "--cache-dir", str(shared / "sg"), "--output-format", "json"], root)
    assert_good_findings(res, root)
    assert_cache_named(res)
    assert snapshot(shared / "sg") == planted, "specguard wrote into the other user's folder"


def test_cache_dir_symlink_planted_in_sticky_folder(work):
    """CLASS 2: `--cache-dir shared/sg` where another user planted `shared/sg` as a symlink to a victim's folder before the first run. EXPECT: nothing is written into the victim's folder; the findings are reported; no traceback."""
    root = make_project(work / "proj")
    shared = work / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    victim = work / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("the victim's files\n")
    os.symlink(victim, shared / "sg")
    os.lchown(shared / "sg", OTHER_UID, OTHER_GID)
    before = snapshot(victim)
    res = run_cli(["check", "pkg", "--cache-dir", str(shared / "sg"), "--output-format", "json"], root)
    assert_no_crash(res, (1, 2))
    if res.rc == 1:
        assert_good_findings(res, root)
    assert snapshot(victim) == before, f"the cache was written through the planted link: {sorted(snapshot(victim))}"


def test_validated_pack_planted_by_other_user(work):
    """CLASS 2: in the per-user cache (~/.cache/specguard/validated, XDG_CACHE_HOME unset), the entry of the built-in rule pack was replaced by another user's file (owner 65534) holding a validated pack that matches nothing. EXPECT: the entry is ignored: the three findings are reported (rc 1)."""
    root = make_project(work / "proj")
    home = work / "home"
    env = {"XDG_CACHE_HOME": None}
    r = run_cli(["check", "pkg", "-n"], root, env=env)
    validated = home / ".cache" / "specguard" / "validated"
    assert r.rc == 1 and validated.is_dir(), f"cannot set up: no validated cache under HOME: {r!r}"
    builtin = set(os.listdir(validated))
    (work / "blind.toml").write_text(
        '[speculators]\nreplace = true\nbases = ["NoSuchBase"]\n'
        '[metadata]\nreplace = true\nsink = ["no_such_sink"]\n'
        '[kv_groups]\nreplace = true\nflags = ["no_such_flag"]\n'
    )
    r = run_cli(["check", "pkg", "-n", "--rule-pack", str(work / "blind.toml")], root, env=env)
    assert r.rc == 0, f"cannot set up: the blinding pack still finds something: {r!r}"
    blind = set(os.listdir(validated)) - builtin
    assert len(builtin) == 1 and len(blind) == 1, f"cannot set up: validated entries {builtin} / {blind}"
    shutil.copyfile(validated / blind.pop(), validated / (name := builtin.pop()))
    os.chown(validated / name, OTHER_UID, OTHER_GID)
    res = run_cli(["check", "pkg", "-n", "--output-format", "json"], root, env=env)
    assert_good_findings(res, root)


def test_user_cache_folder_created_by_other_user(work):
    """CLASS 2: XDG_CACHE_HOME is a shared sticky folder where another user created `specguard/` first (owner 65534), holding a validated entry for the built-in pack that matches nothing. EXPECT: the three findings are reported (rc 1) and the other user's folder is left unchanged."""
    root = make_project(work / "proj")
    xdg = work / "xdg"
    xdg.mkdir()
    os.chmod(xdg, 0o1777)
    env = {"XDG_CACHE_HOME": str(xdg)}
    r = run_cli(["check", "pkg", "-n"], root, env=env)
    validated = xdg / "specguard" / "validated"
    assert r.rc == 1 and validated.is_dir(), f"cannot set up: no validated cache under XDG_CACHE_HOME: {r!r}"
    builtin = set(os.listdir(validated))
    (work / "blind.toml").write_text(
        '[speculators]\nreplace = true\nbases = ["NoSuchBase"]\n'
        '[metadata]\nreplace = true\nsink = ["no_such_sink"]\n'
        '[kv_groups]\nreplace = true\nflags = ["no_such_flag"]\n'
    )
    r = run_cli(["check", "pkg", "-n", "--rule-pack", str(work / "blind.toml")], root, env=env)
    blind = set(os.listdir(validated)) - builtin
    assert r.rc == 0 and len(builtin) == 1 and len(blind) == 1, f"cannot set up the blinding entry: {r!r}"
    shutil.copyfile(validated / blind.pop(), validated / builtin.pop())
    chown_tree(xdg / "specguard")
    planted = snapshot(xdg / "specguard")
    res = run_cli(["check", "pkg", "-n", "--output-format", "json"], root, env=env)
    assert_good_findings(res, root)
    assert snapshot(xdg / "specguard") == planted, "specguard wrote into another user's cache folder"


def test_served_source_check_cache_planted(work, vllm_src):
    """CLASS 2: `specguard config` caches its check of the served vLLM under ~/.cache/specguard/check; another user's copy of that folder (owner 65534), made from a tree whose v1/kv_cache_interface.py was blanked with the same size and mtime, hides the SG201 merge. EXPECT: the planted cache is ignored: CFG102 and CFG104 are both reported (rc 1), as on a clean run."""
    src = copy_vllm(vllm_src, work / "src" / "vllm")
    (work / "c.yaml").write_text(DSPARK_DCP_YAML)
    kv = src / "v1" / "kv_cache_interface.py"
    good = blank_same_size(kv)
    r = run_cli(["config", "c.yaml", "--vllm-source", str(src), "--format", "json"], work)
    assert_no_crash(r, (0, 1, 3))
    kv.write_bytes(good)
    os.utime(kv, (T_OLD, T_OLD))
    check_cache = work / "home" / ".cache" / "specguard" / "check"
    assert check_cache.is_dir(), "cannot set up: config made no check cache under XDG_CACHE_HOME"
    chown_tree(check_cache)
    res = run_cli(["config", "c.yaml", "--vllm-source", str(src), "--format", "json"], work)
    assert_no_crash(res, (1,))
    assert config_codes(res) == DSPARK_CODES, f"hazards differ from a clean run: {res!r}"


def test_cache_file_hardlinked_to_victim(work):
    """CLASS 2: a file of the project's cache (each of the version folder's files) is a hard link to a victim's file outside the tree. EXPECT: after a run that refreshes the cache, the victim's file is byte-for-byte unchanged; the findings are reported."""
    root = make_project(work / "proj")
    r = run_cli(["check", "pkg"], root)
    (version,) = [p for p in (root / ".specguard_cache").iterdir() if p.is_dir()]
    victim = work / "victim"
    victim.mkdir()
    names = sorted(p.name for p in version.iterdir())
    assert names, f"cannot set up: empty cache folder: {r!r}"
    for name in names:
        (victim / name).write_bytes(b"VICTIM DATA " + name.encode() + b"\n")
        os.unlink(version / name)
        os.link(victim / name, version / name)
    (root / "pkg" / "spec.py").write_text(GOOD_FILES["pkg/spec.py"] + "\n# touched\n")
    res = run_cli(["check", "pkg", "--output-format", "json"], root)
    for name in names:
        assert (victim / name).read_bytes() == b"VICTIM DATA " + name.encode() + b"\n", f"victim's {name} was rewritten"
    assert_good_findings(res, root)


def test_cache_files_replaced_by_special_files(work):
    """CLASS 2: the project's cache files were replaced: scans by a FIFO, results by a symlink to /dev/zero, judged by a folder, and the per-user validated entry by a FIFO. EXPECT: no hang, no traceback; the three findings are reported (rc 1)."""
    root = make_project(work / "proj")
    r = run_cli(["check", "pkg"], root)
    (version,) = [p for p in (root / ".specguard_cache").iterdir() if p.is_dir()]
    names = sorted(p.name for p in version.iterdir())
    assert len(names) >= 2, f"cannot set up: cache files {names}: {r!r}"
    kinds = ["fifo", "devzero", "dir"]
    for i, name in enumerate(names):
        os.unlink(version / name)
        kind = kinds[i % 3]
        if kind == "fifo":
            os.mkfifo(version / name)
        elif kind == "devzero":
            os.symlink("/dev/zero", version / name)
        else:
            os.mkdir(version / name)
    validated = work / "home" / ".cache" / "specguard" / "validated"
    for p in validated.iterdir():
        os.unlink(p)
        os.mkfifo(p)
    res = run_cli(["check", "pkg", "--output-format", "json"], root)
    assert_good_findings(res, root)


def test_cache_file_sparse_huge(work):
    """CLASS 2: each of the project's cache files is replaced (by the same user, by accident or by a full disk's tool) with a 16 GiB sparse file. EXPECT: the cache is not loaded whole: the three findings are reported (rc 1) within 2 GiB of address space; no traceback."""
    root = make_project(work / "proj")
    r = run_cli(["check", "pkg"], root)
    (version,) = [p for p in (root / ".specguard_cache").iterdir() if p.is_dir()]
    names = sorted(p.name for p in version.iterdir())
    assert names, f"cannot set up: empty cache folder: {r!r}"
    for name in names:
        with open(version / name, "r+b") as f:
            f.truncate(16 * 1024**3)
    res = run_cli(["check", "pkg", "--output-format", "json"], root)
    assert_good_findings(res, root)
