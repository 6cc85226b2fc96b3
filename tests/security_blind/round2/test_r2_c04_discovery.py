"""Class 4: discovery and the served-source reader meeting links out of the tree, loops, deep nesting, huge
folders, special files named `*.py`, and files that vanish or change type while the tool runs."""

import os
import socket
import stat

from sg2harness import (
    DSPARK_CODES,
    DSPARK_DCP_YAML,
    SG101_SRC,
    assert_good_findings,
    assert_no_crash,
    config_codes,
    copy_vllm,
    hook_events,
    make_project,
    run_cli,
    run_hooked,
    write_tree,
)


def check_json(root, *paths):
    return run_cli(["check", *paths, "--output-format", "json"], root)


def test_links_to_system_trees_in_walk(work):
    """CLASS 4: the walked tree holds symlinks to /, /proc, /sys, /dev and to /dev/zero, /dev/urandom, /proc/kcore, /proc/self/mem under `*.py` names. EXPECT: none is followed into (no hang, within 2 GiB and 60 s CPU); the three findings are reported (rc 1)."""
    root = make_project(work / "proj")
    links = {
        "pkg/rootfs": "/",
        "pkg/proc": "/proc",
        "pkg/sys": "/sys",
        "pkg/dev": "/dev",
        "pkg/zero.py": "/dev/zero",
        "pkg/urandom.py": "/dev/urandom",
        "pkg/kcore.py": "/proc/kcore",
        "pkg/mem.py": "/proc/self/mem",
    }
    for rel, target in links.items():
        os.symlink(target, root / rel)
    res = check_json(root, ".")
    assert_good_findings(res, root)


def test_special_paths_named_on_command_line(work):
    """CLASS 4: paths named on the command line that are not regular files: a link `pkg/zero.py` to /dev/zero, /dev/urandom, /proc/kcore, /proc/self/mem and /proc/self/fd/0. EXPECT: no hang, nothing read from them (within 2 GiB / 60 s CPU), no traceback; the good files' three findings are still reported (rc 1 or 2)."""
    root = make_project(work / "proj")
    os.symlink("/dev/zero", root / "pkg" / "zero.py")
    res = run_cli(
        [
            "check",
            "pkg",
            "pkg/zero.py",
            "/dev/urandom",
            "/proc/kcore",
            "/proc/self/mem",
            "/proc/self/fd/0",
            "--output-format",
            "json",
        ],
        root,
    )
    assert_no_crash(res, (1, 2))
    res.rc = 1
    assert_good_findings(res, root)


def test_symlink_loops(work):
    """CLASS 4: link loops in the walk: `pkg/self` -> `.`, `pkg/up` -> `..`, `pkg/a/b` -> `../a`, a link to itself `pkg/me.py` -> `me.py`, and a two-link cycle `pkg/x.py` <-> `pkg/y.py`. EXPECT: the walk ends; the three findings are reported once each (rc 1)."""
    root = make_project(work / "proj")
    pkg = root / "pkg"
    os.symlink(".", pkg / "self")
    os.symlink("..", pkg / "up")
    (pkg / "a").mkdir()
    os.symlink("../a", pkg / "a" / "b")
    os.symlink("me.py", pkg / "me.py")
    os.symlink("y.py", pkg / "x.py")
    os.symlink("x.py", pkg / "y.py")
    res = check_json(root, ".")
    assert_good_findings(res, root)
    import json

    assert len(json.loads(res.out)) == 3, f"a finding was reported twice through a loop: {res!r}"


def _deep_tree(base, depth, leaf_name, leaf_data):
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    fds = [fd]
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fds[-1])
            fds.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
        leaf = os.open(leaf_name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fds[-1])
        os.write(leaf, leaf_data)
        os.close(leaf)
    finally:
        for f in fds:
            os.close(f)


def _remove_deep(base):
    # iterative removal (a recursive one would hit Python's recursion limit)
    while os.path.isdir(os.path.join(base, "d")):
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
        chain = [fd]
        while True:
            names = os.listdir(chain[-1])
            if "d" not in names:
                break
            chain.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=chain[-1]))
        for name in os.listdir(chain[-1]):
            os.unlink(name, dir_fd=chain[-1])
        os.rmdir("d", dir_fd=chain[-2])
        for f in chain:
            os.close(f)


def test_nesting_deeper_than_path_max(work):
    """CLASS 4: 2,100 nested folders under `deep/` (a path longer than PATH_MAX, deeper than Python's recursion limit) with a speculator file at the bottom. EXPECT: no traceback (no RecursionError, no ENAMETOOLONG crash); the good files' three findings are reported (rc 1, or 2 with an error saying where the walk stopped)."""
    root = make_project(work / "proj")
    (root / "deep").mkdir()
    _deep_tree(root / "deep", 2100, "bottom.py", SG101_SRC.encode())
    try:
        res = check_json(root, ".")
        assert_no_crash(res, (1, 2))
        res.rc = 1
        assert_good_findings(res, root)
    finally:
        _remove_deep(root / "deep")


def test_folder_with_200k_entries(work):
    """CLASS 4: a folder with 200,000 entries (files that are not Python) beside the good files. EXPECT: the three findings are reported (rc 1) within 2 GiB and 60 s of CPU; no traceback."""
    root = make_project(work / "proj")
    big = root / "big"
    big.mkdir()
    fd = os.open(big, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(200_000):
            os.close(os.open(f"entry{i:06d}.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    res = check_json(root, ".")
    assert_good_findings(res, root)


def test_special_files_named_py(work):
    """CLASS 4: a FIFO `pkg/fifo.py`, a UNIX socket `pkg/sock.py` and a character device `pkg/null.py` (mknod 1:3) in the walk, and the same three named on the command line. EXPECT: no hang (nothing opened that blocks), no traceback; the three findings are reported (rc 1, or 2 for the named non-files)."""
    root = make_project(work / "proj")
    pkg = root / "pkg"
    os.mkfifo(pkg / "fifo.py")
    s = socket.socket(socket.AF_UNIX)
    sock_path = str(pkg / "sock.py")
    assert len(sock_path) < 100, f"cannot set up: socket path too long: {sock_path}"
    s.bind(sock_path)
    os.mknod(pkg / "null.py", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    try:
        res = check_json(root, ".")
        assert_good_findings(res, root)
        res2 = check_json(root, "pkg", "pkg/fifo.py", "pkg/sock.py", "pkg/null.py")
        assert_no_crash(res2, (1, 2))
        res2.rc = 1
        assert_good_findings(res2, root)
    finally:
        s.close()


def test_files_vanish_or_change_type_during_run(work):
    """CLASS 4: between the walk and the read, `pkg/gone.py` is deleted, `pkg/todir.py` becomes a folder, `pkg/tofifo.py` a FIFO and `pkg/tolink.py` a symlink to /dev/zero (each done by a hook right before specguard opens it). EXPECT: no hang, no traceback; the three good findings are reported (rc 1 or 2)."""
    root = make_project(work / "proj")
    for name in ("gone", "todir", "tofifo", "tolink"):
        write_tree(root, {f"pkg/{name}.py": SG101_SRC.replace("MyDraftSpeculator", f"S_{name}")})
    hook = """
done = set()
def before(path, *a, **k):
    name = basename(path)
    if name in ('gone.py', 'todir.py', 'tofifo.py', 'tolink.py') and name not in done:
        done.add(name)
        p = os.path.join(PKG, name)
        real.unlink(p)
        if name == 'todir.py':
            real.mkdir(p)
        elif name == 'tofifo.py':
            real.mkfifo(p)
        elif name == 'tolink.py':
            real.symlink('/dev/zero', p)
        mark(name)
wrap(os, 'open', before)
""".replace("PKG", repr(str(root / "pkg")))
    res = run_hooked(["check", ".", "--output-format", "json"], root, hook, work / "log")
    assert sorted(hook_events(work / "log")) == ["gone.py", "todir.py", "tofifo.py", "tolink.py"], (
        f"cannot set up: not every file was opened: {hook_events(work / 'log')}: {res!r}"
    )
    assert_no_crash(res, (1, 2))
    res.rc = 1
    assert_good_findings(res, root)


def test_served_source_with_links_out_and_special_files(work, vllm_src):
    """CLASS 4: the served vLLM tree (a copy of 0.33.0) also holds `vllm/rootfs` -> /, `vllm/procfs` -> /proc, `vllm/loop` -> `.`, `vllm/zero.py` -> /dev/zero, a FIFO `vllm/fifo.py` and a socket-free device `vllm/null.py` (1:3). EXPECT: no hang, no traceback; the same hazards as on the clean tree: CFG102 and CFG104 (rc 1)."""
    src = copy_vllm(vllm_src, work / "src" / "vllm")
    os.symlink("/", src / "rootfs")
    os.symlink("/proc", src / "procfs")
    os.symlink(".", src / "loop")
    os.symlink("/dev/zero", src / "zero.py")
    os.mkfifo(src / "fifo.py")
    os.mknod(src / "null.py", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    (work / "c.yaml").write_text(DSPARK_DCP_YAML)
    res = run_cli(["config", "c.yaml", "--vllm-source", str(src), "--format", "json"], work)
    assert_no_crash(res, (1,))
    assert config_codes(res) == DSPARK_CODES, res


def test_served_module_becomes_fifo_while_read(work, vllm_src):
    """CLASS 4: while `specguard config` reads the served tree, `v1/attention/backends/mla/flashinfer_mla.py` is replaced by a FIFO right before it is opened. EXPECT: no hang, no traceback; CFG104 is still reported (rc 1) and CFG102 is named (fired, or not judged naming the module), never silently clean."""
    src = copy_vllm(vllm_src, work / "src" / "vllm")
    (work / "c.yaml").write_text(DSPARK_DCP_YAML)
    target = src / "v1" / "attention" / "backends" / "mla" / "flashinfer_mla.py"
    hook = """
once = Once()
def before(path, *a, **k):
    if fspath_str(path).endswith('mla/flashinfer_mla.py') or (basename(path) == 'flashinfer_mla.py' and 'dir_fd' in k):
        if once():
            real.unlink(TARGET)
            real.mkfifo(TARGET)
            mark('fifo')
wrap(os, 'open', before)
""".replace("TARGET", repr(str(target)))
    res = run_hooked(["config", "c.yaml", "--vllm-source", str(src), "--format", "json"], work, hook, work / "log")
    assert hook_events(work / "log") == ["fifo"], f"cannot set up: the module was never opened: {res!r}"
    assert_no_crash(res, (1,))
    codes = config_codes(res)
    assert "CFG104" in codes, res
    assert "CFG102" in codes or "CFG102" in res.stderr, f"CFG102 silently dropped: {res!r}"
