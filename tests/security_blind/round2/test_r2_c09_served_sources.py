"""Class 9: `specguard config --vllm-source DIR` with sources that are not vLLM or only half of it."""

import os
import shutil
import sysconfig
from pathlib import Path

from sg2harness import (
    DSPARK_CODES,
    DSPARK_DCP_YAML,
    assert_no_crash,
    assert_one_line_error,
    config_codes,
    copy_vllm,
    run_cli,
)


def judge(work, src):
    (work / "c.yaml").write_text(DSPARK_DCP_YAML)
    return run_cli(["config", "c.yaml", "--vllm-source", str(src), "--format", "json"], work)


def test_empty_sources(work):
    """CLASS 9: `--vllm-source` is an empty folder; a `vllm/` holding only an empty `__init__.py`; a folder holding such a `vllm/`. EXPECT: each refused with rc 2 and one error line; no traceback."""
    (work / "empty").mkdir()
    (work / "bare" / "vllm").mkdir(parents=True)
    (work / "bare" / "vllm" / "__init__.py").write_text("")
    for src in (work / "empty", work / "bare" / "vllm", work / "bare"):
        assert_one_line_error(judge(work, src))


def test_other_package_renamed_vllm(work):
    """CLASS 9: another package (the installed `yaml` package's sources) copied as `vllm/`, plus an `engine/arg_utils.py` that defines no EngineArgs and a `config/__init__.py` that names none of the config classes. EXPECT: refused with rc 2, one error line naming what is missing; no traceback."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    yaml_pkg = purelib / "yaml"
    assert yaml_pkg.is_dir(), f"cannot set up: no yaml package at {yaml_pkg}"
    src = work / "src" / "vllm"
    shutil.copytree(yaml_pkg, src, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    (src / "engine").mkdir()
    (src / "engine" / "arg_utils.py").write_text("class NotEngineArgs:\n    def add_cli_args(self):\n        pass\n")
    (src / "config").mkdir()
    (src / "config" / "__init__.py").write_text("from yaml import *\n")
    res = judge(work, src)
    assert_one_line_error(res)
    assert "EngineArgs" in res.stderr or "arg_utils" in res.stderr, f"the error does not name what is missing: {res!r}"


def test_key_module_truncated(work, vllm_src):
    """CLASS 9: a real 0.33.0 tree whose `engine/arg_utils.py` is cut in the middle of a line (a syntax error), and another whose `config/__init__.py` is empty. EXPECT: each refused with rc 2 and one error line; no traceback."""
    a = copy_vllm(vllm_src, work / "a" / "vllm")
    data = (a / "engine" / "arg_utils.py").read_bytes()
    (a / "engine" / "arg_utils.py").write_bytes(data[: len(data) // 2 + 7])
    assert_one_line_error(judge(work, a))
    b = copy_vllm(vllm_src, work / "b" / "vllm")
    (b / "config" / "__init__.py").write_bytes(b"")
    assert_one_line_error(judge(work, b))


def test_key_modules_binary_or_directory(work, vllm_src):
    """CLASS 9: a real tree whose `engine/arg_utils.py` is replaced by a folder of that name, and another whose `config/__init__.py` is 1 MiB of random bytes. EXPECT: each refused with rc 2 and one error line; no traceback."""
    a = copy_vllm(vllm_src, work / "a" / "vllm")
    os.unlink(a / "engine" / "arg_utils.py")
    (a / "engine" / "arg_utils.py").mkdir()
    (a / "engine" / "arg_utils.py" / "__init__.py").write_text("class EngineArgs:\n    pass\n")
    assert_one_line_error(judge(work, a))
    b = copy_vllm(vllm_src, work / "b" / "vllm")
    (b / "config" / "__init__.py").write_bytes(os.urandom(1024 * 1024))
    assert_one_line_error(judge(work, b))


def test_key_module_fifo_or_link_to_device(work, vllm_src):
    """CLASS 9: a real tree whose `engine/arg_utils.py` is a FIFO (nobody writes it), and another whose `config/__init__.py` is a symlink to /dev/zero. EXPECT: no hang; each refused with rc 2 and one error line; no traceback."""
    a = copy_vllm(vllm_src, work / "a" / "vllm")
    os.unlink(a / "engine" / "arg_utils.py")
    os.mkfifo(a / "engine" / "arg_utils.py")
    assert_one_line_error(judge(work, a))
    b = copy_vllm(vllm_src, work / "b" / "vllm")
    os.unlink(b / "config" / "__init__.py")
    os.symlink("/dev/zero", b / "config" / "__init__.py")
    assert_one_line_error(judge(work, b))


def test_version_file_lies(work, vllm_src):
    """CLASS 9: a real 0.33.0 tree whose `_version.py` claims 0.28.0 (`__version__`, `version`, `__version_tuple__`). EXPECT: the verdict comes from the source, not the version: CFG102 and CFG104 exactly as on the unmodified tree (rc 1)."""
    src = copy_vllm(vllm_src, work / "src" / "vllm")
    (src / "_version.py").write_text(
        "__version__ = version = '0.28.0'\n__version_tuple__ = version_tuple = (0, 28, 0)\n"
    )
    res = judge(work, src)
    assert_no_crash(res, (1,))
    assert config_codes(res) == DSPARK_CODES, res


def test_version_file_hostile(work, vllm_src):
    """CLASS 9: `_version.py` computes its version with code that would create a marker file if run, and its version string holds terminal escapes, a newline and 100,000 characters. EXPECT: the marker is never created; rc 1 with CFG102 and CFG104; no raw ESC on stdout or stderr; no stderr line over 20,000 characters; no traceback."""
    src = copy_vllm(vllm_src, work / "src" / "vllm")
    marker = work / "MARKER"
    (src / "_version.py").write_text(
        f"import os\n__version__ = os.system('touch {marker}') or '0.33.0\\x1b[2J\\x1b]0;pwn\\x07\\n' + '9' * 100000\n"
        "version = __version__\n"
    )
    res = judge(work, src)
    assert not marker.exists(), "the served source's _version.py was executed"
    assert_no_crash(res, (1,))
    assert config_codes(res) == DSPARK_CODES, res
    assert b"\x1b" not in res.out + res.err, f"raw ESC from the version string: {res!r}"
    assert max((len(ln) for ln in res.stderr.splitlines()), default=0) < 20_000, "an unbounded line from the version"


def test_backend_module_missing(work, vllm_src):
    """CLASS 9: a real tree with `v1/attention/backends/mla/flashinfer_mla.py` deleted (the builder CFG102 evaluates). EXPECT: rc 1 with CFG104, and CFG102 is named as not judged (never silently clean); `--strict` still exits 1 (a hazard was found)."""
    src = copy_vllm(vllm_src, work / "src" / "vllm")
    os.unlink(src / "v1" / "attention" / "backends" / "mla" / "flashinfer_mla.py")
    res = judge(work, src)
    assert_no_crash(res, (1,))
    assert "CFG104" in config_codes(res), res
    assert "CFG102" in res.stderr and "not judged" in res.stderr, f"CFG102 silently dropped: {res!r}"
    strict = run_cli(["config", "c.yaml", "--vllm-source", str(src), "--format", "json", "--strict"], work)
    assert_no_crash(strict, (1,))


def test_vllm_source_special_paths(work):
    """CLASS 9: `--vllm-source` given /dev/zero, /proc, /proc/self/fd, /sys/kernel, a FIFO and a regular file. EXPECT: no hang, within 2 GiB / 60 s CPU; each refused with rc 2 and one error line; no traceback."""
    os.mkfifo(work / "fifo")
    (work / "file.py").write_text("x = 1\n")
    for src in ("/dev/zero", "/proc", "/proc/self/fd", "/sys/kernel", str(work / "fifo"), str(work / "file.py")):
        res = judge(work, src)
        assert_one_line_error(res)
