"""CLASS 4: links out of the tree during discovery (committed folder links to /, /proc, /usr, loops, a folder
outside holding bad files, special files behind a `.py` name), for `specguard check` and for the served
source of `specguard config --vllm-source`."""

import os
from pathlib import Path

from sg1harness import (
    DSPARK_DCP_YAML,
    SG101_BAD,
    SG103_BAD,
    SG201_BAD,
    assert_sane,
    check_json,
    config_codes,
    diff_snapshots,
    run_cli,
    snapshot,
    write,
)


def _project(base: Path) -> Path:
    proj = base / "proj"
    write(proj / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(proj / "pkg" / "__init__.py", "")
    write(proj / "pkg" / "a.py", SG101_BAD)
    write(proj / "pkg" / "b.py", SG103_BAD)
    return proj


def _reference(tmp_path):
    clean = _project(tmp_path / "clean-base")
    res, ref = check_json(["check", "pkg", "-n"], clean, tmp_path / "clean-home", clean)
    assert res.rc == 1 and ref, res.describe()
    return ref


def _check_linked(tmp_path, home, proj, link_names, *, cpu_s=60):
    res, found = check_json(["check", "pkg", "-n"], proj, home, proj, cpu_s=cpu_s, timeout=90)
    assert_sane(res, rcs=(1,))
    ref = _reference(tmp_path)
    outside = [f for f in found if f[1].startswith("..") or os.path.isabs(f[1])]
    assert not outside, f"findings reported for files outside the tree: {outside[:5]}\n{res.describe()}"
    assert found == ref, f"findings differ from the tree without links:\nclean {ref}\nlinks {found}\n{res.describe()}"
    for name in link_names:
        lines = [ln for ln in res.err.splitlines() if name in ln]
        assert lines, f"no note on stderr naming the link {name!r}\n{res.describe()}"
    return res


def test_committed_link_to_filesystem_root(tmp_path, home):
    """CLASS 4: a committed folder symlink pkg/rootfs -> / inside the checked tree. EXPECT: bounded CPU/memory, exit 1 with exactly the findings of the tree without the link (nothing outside reported), a stderr note naming the link."""
    proj = _project(tmp_path)
    os.symlink("/", proj / "pkg" / "rootfs")
    _check_linked(tmp_path, home, proj, ["rootfs"])


def test_link_to_proc(tmp_path, home):
    """CLASS 4: a folder symlink pkg/procfs -> /proc (endless, changing, self-referencing pseudo-files). EXPECT: bounded, exit 1 with the clean tree's findings, a stderr note naming the link."""
    proj = _project(tmp_path)
    os.symlink("/proc", proj / "pkg" / "procfs")
    _check_linked(tmp_path, home, proj, ["procfs"])


def test_link_to_usr(tmp_path, home):
    """CLASS 4: a folder symlink pkg/sys_usr -> /usr (a big system folder full of .py files). EXPECT: bounded, exit 1 with the clean tree's findings only, a stderr note naming the link."""
    proj = _project(tmp_path)
    os.symlink("/usr", proj / "pkg" / "sys_usr")
    _check_linked(tmp_path, home, proj, ["sys_usr"])


def test_link_loops(tmp_path, home):
    """CLASS 4: link loops: pkg/self -> ., pkg/up -> .., pkg/deep/back -> ../.., two dangling links pointing at each other (l1.py <-> l2.py) and a file link to itself (me.py -> me.py). EXPECT: the run ends within bounds, exit 1, each finding reported once (the clean tree's findings), no traceback."""
    proj = _project(tmp_path)
    pkg = proj / "pkg"
    os.symlink(".", pkg / "self")
    os.symlink("..", pkg / "up")
    (pkg / "deep").mkdir()
    os.symlink("../..", pkg / "deep" / "back")
    os.symlink("l2.py", pkg / "l1.py")
    os.symlink("l1.py", pkg / "l2.py")
    os.symlink("me.py", pkg / "me.py")
    res, found = check_json(["check", "pkg", "-n"], proj, home, proj, timeout=90)
    assert_sane(res, rcs=(1,))
    assert found == _reference(tmp_path), f"loops changed the findings: {found}\n{res.describe()}"


def test_link_to_outside_folder_with_bad_files(tmp_path, home):
    """CLASS 4: pkg/vendored -> a folder OUTSIDE the checked tree holding .py files with findings (SG101, SG201). EXPECT: none of the outside files is reported, the tree's own findings are, a stderr note names the link; exit 1."""
    proj = _project(tmp_path)
    outside = tmp_path / "outside-src"
    write(outside / "evil1.py", SG101_BAD.replace("MyDraftSpeculator", "OutsideSpec1"))
    write(outside / "evil2.py", SG201_BAD)
    os.symlink(outside, proj / "pkg" / "vendored")
    res = _check_linked(tmp_path, home, proj, ["vendored"])
    assert "evil1" not in res.out and "evil2" not in res.out, res.describe()


def test_fix_through_file_link_to_outside(tmp_path, home):
    """CLASS 4: pkg/kv.py is a symlink to a file outside the tree holding a fixable SG201; `check pkg --fix`. EXPECT: the outside file is byte-identical afterwards, no traceback, exit 0/1."""
    proj = _project(tmp_path)
    outside = tmp_path / "outside-src"
    target = write(outside / "kv_real.py", SG201_BAD)
    os.symlink(target, proj / "pkg" / "kv.py")
    before = snapshot(outside)
    res = run_cli(["check", "pkg", "--fix", "-n"], proj, home)
    assert_sane(res, rcs=(0, 1))
    diff = diff_snapshots(before, snapshot(outside))
    assert not diff, f"--fix wrote through a link out of the tree: {diff}\n{res.describe()}"


def test_special_files_behind_py_names(tmp_path, home):
    """CLASS 4: files the walk meets that are not regular: pkg/fifo.py is a FIFO nobody writes to, pkg/zero.py -> /dev/zero, pkg/rand.py -> /dev/urandom, pkg/kmsg.py -> /proc/self/mem. EXPECT: the run ends (no hang on the FIFO, no endless read), bounded memory, exit 1 with the clean tree's findings, a stderr note naming each."""
    proj = _project(tmp_path)
    pkg = proj / "pkg"
    os.mkfifo(pkg / "fifo.py")
    os.symlink("/dev/zero", pkg / "zero.py")
    os.symlink("/dev/urandom", pkg / "rand.py")
    os.symlink("/proc/self/mem", pkg / "kmsg.py")
    res, found = check_json(["check", "pkg", "-n"], proj, home, proj, timeout=90)
    assert_sane(res, rcs=(1,))
    ref = _reference(tmp_path)
    ours = [f for f in found if f[1] in {c[1] for c in ref}]
    assert ours == ref, f"the good files' findings changed: {found}\n{res.describe()}"
    for name in ("fifo.py", "zero.py", "rand.py", "kmsg.py"):
        said = [ln for ln in res.err.splitlines() if name in ln] + [f for f in found if f[1].endswith(name)]
        assert said, f"{name} silently skipped: no note and no SG000\n{res.describe()}"


def _config(tmp_path, home, served, yaml_text=DSPARK_DCP_YAML):
    cfg = write(tmp_path / "cfg.yaml", yaml_text)
    return run_cli(["config", str(cfg), "--vllm-source", str(served), "--format", "json"], tmp_path, home, timeout=90)


def test_config_served_source_link_to_proc(tmp_path, home, vllm_copy, vllm_clean_verdict):
    """CLASS 4: specguard config --vllm-source on a copy of vLLM 0.33.0 with a planted vllm/config/zz -> /proc. EXPECT: bounded, the same hazard codes as on the pristine copy (CFG102, CFG104; exit 1), no traceback."""
    os.symlink("/proc", vllm_copy / "vllm" / "config" / "zz")
    res = _config(tmp_path, home, vllm_copy)
    assert_sane(res, rcs=(1,))
    assert config_codes(res) == vllm_clean_verdict, res.describe()


def test_config_served_source_link_to_root(tmp_path, home, vllm_copy, vllm_clean_verdict):
    """CLASS 4: specguard config on a vLLM 0.33.0 copy with a planted vllm/engine/x -> / and vllm/v1/usrlib -> /usr/lib. EXPECT: bounded, the same hazard codes as on the pristine copy, no traceback, no file outside reported."""
    os.symlink("/", vllm_copy / "vllm" / "engine" / "x")
    os.symlink("/usr/lib", vllm_copy / "vllm" / "v1" / "usrlib")
    res = _config(tmp_path, home, vllm_copy)
    assert_sane(res, rcs=(1,))
    assert config_codes(res) == vllm_clean_verdict, res.describe()
    assert "/usr/lib/" not in res.out, res.describe()


def test_config_served_source_link_loops_and_outside_bad_module(tmp_path, home, vllm_copy, vllm_clean_verdict):
    """CLASS 4: specguard config on a vLLM 0.33.0 copy with loops (vllm/v1/loop -> .., vllm/config/me -> .) and vllm/v1/spec_decode/ext -> an outside folder holding a speculator with SG102/SG103. EXPECT: bounded, the same hazard codes as on the pristine copy (the outside speculator does not count), no traceback."""
    os.symlink("..", vllm_copy / "vllm" / "v1" / "loop")
    os.symlink(".", vllm_copy / "vllm" / "config" / "me")
    outside = tmp_path / "outside-spec"
    write(outside / "__init__.py", "")
    write(outside / "bad.py", SG103_BAD)
    spec_dir = vllm_copy / "vllm" / "v1" / "spec_decode"
    spec_dir.mkdir(parents=True, exist_ok=True)
    os.symlink(outside, spec_dir / "ext")
    res = _config(tmp_path, home, vllm_copy)
    assert_sane(res, rcs=(1,))
    assert config_codes(res) == vllm_clean_verdict, res.describe()
