"""Harness of the blind security set, round 2 (imported by conftest.py and the tests).

Every run of specguard is a child process (`sys.executable -m specguard ...`, or the hooked driver that runs
the CLI in-process with `runpy` after patching low-level calls), bounded by RLIMIT_AS / RLIMIT_CPU (and
RLIMIT_FSIZE where a test asks), with HOME and XDG_CACHE_HOME inside the test's tmp folder. A generous
subprocess timeout is only a safety net against a hang; no test asserts on wall-clock time.
"""

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
GIB = 1024**3
SAFETY_TIMEOUT = 420
OTHER_UID = 65534
OTHER_GID = 65534

VLLM_VERSION = "0.33.0"
VLLM_CACHE = Path.home() / ".cache" / "blind-sec2"

# --- real findings: the bad examples of `specguard explain SG101`, `SG103`, `SG201` -------------------------

SG101_SRC = textwrap.dedent(
    """\
    import functools

    from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
    from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

    class MyDraftSpeculator(DraftModelSpeculator):
        def propose(self, num_reqs, batch_desc):
            return build_attn_metadata(attn_groups=self.attn_groups, num_reqs=num_reqs)  # SG101
    """
)
SG101_LINE = 8

SG103_SRC = textwrap.dedent(
    """\
    from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
    from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

    class MyDraftSpeculator(DraftModelSpeculator):
        def _padded(self, batch_desc):
            return batch_desc.num_tokens

        def propose(self, num_reqs, num_tokens):
            batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
            n = self._padded(batch_desc)  # a helper's return value
            return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # SG103
    """
)
SG103_LINE = 11

SG201_SRC = textwrap.dedent(
    """\
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class MLAAttentionSpec:
        non_causal_multi_token_decode: bool = False

        @classmethod
        def merge(cls, specs):
            return cls(
                non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs),
            )
    """
)
SG201_LINE = 10

GOOD_FILES = {"pkg/spec.py": SG101_SRC, "pkg/pad.py": SG103_SRC, "pkg/merge.py": SG201_SRC}
GOOD_FINDINGS = {
    ("pkg/spec.py", "SG101", SG101_LINE),
    ("pkg/pad.py", "SG103", SG103_LINE),
    ("pkg/merge.py", "SG201", SG201_LINE),
}


# --- running the tool ------------------------------------------------------------------------------------------


@dataclass
class Result:
    rc: int
    out: bytes
    err: bytes
    args: list

    @property
    def stdout(self):
        return self.out.decode("utf-8", "surrogateescape")

    @property
    def stderr(self):
        return self.err.decode("utf-8", "surrogateescape")

    def __repr__(self):
        return f"Result(rc={self.rc}, args={self.args!r}\n--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-3000:]})"


def _limits(as_bytes, cpu_s, fsize):
    def apply():
        os.setsid()
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if as_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))
        if cpu_s:
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return apply


def child_env(home, env=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "SPECGUARD", "VLLM_", "PIP_"))}
    home = Path(home)
    (home / ".cache").mkdir(parents=True, exist_ok=True)
    e.update(
        HOME=str(home),
        XDG_CACHE_HOME=str(home / ".cache"),
        PYTHONPATH=str(REPO),
        PYTHONDONTWRITEBYTECODE="1",
        LANG="C.UTF-8",
        LC_ALL="C.UTF-8",
        PIP_NO_INDEX="1",
        NO_COLOR="1",
    )
    e.pop("PYTHONIOENCODING", None)
    if env:
        for k, v in env.items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
    return e


def _run(cmd, cwd, home, env, as_bytes, cpu_s, fsize, stdin=None):
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=child_env(home, env),
        stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_limits(as_bytes, cpu_s, fsize),
    )
    try:
        out, err = proc.communicate(stdin, timeout=SAFETY_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"specguard still running after {SAFETY_TIMEOUT}s (safety net; a hang): {cmd!r}\n{err[-2000:]!r}")
    return Result(proc.returncode, out, err, list(cmd[3:] if cmd[1] == "-m" else cmd[2:]))


def run_cli(args, cwd, env=None, as_bytes=2 * GIB, cpu_s=60, fsize=None, home=None):
    """`specguard ARGS` in a child bounded by rlimits; HOME is `home` or `<cwd's tmp>/home`."""
    cwd = Path(cwd)
    home = Path(home) if home else _home_for(cwd)
    return _run([sys.executable, "-m", "specguard", *map(_arg, args)], cwd, home, env, as_bytes, cpu_s, fsize)


def run_hooked(args, cwd, hook, log, env=None, as_bytes=2 * GIB, cpu_s=60, fsize=None, home=None):
    """The CLI in-process (runpy) in a child, after `hook` (Python source, run with `_hooklib`'s names in scope)
    patched low-level calls. `log` collects what the hook `mark()`s."""
    cwd = Path(cwd)
    home = Path(home) if home else _home_for(cwd)
    driver = Path(log).with_suffix(".driver.py")
    argv = ["specguard", *map(_arg, args)]
    driver.write_text(
        "import runpy, sys\n"
        f"sys.path.insert(0, {str(HERE)!r})\n"
        "from _hooklib import *  # noqa\n"
        f"exec(compile({textwrap.dedent(hook)!r}, 'hook', 'exec'))\n"
        f"sys.argv = {argv!r}\n"
        "runpy.run_module('specguard', run_name='__main__', alter_sys=True)\n"
    )
    e = dict(env or {})
    e["SG_HOOK_LOG"] = str(log)
    return _run([sys.executable, str(driver)], cwd, home, e, as_bytes, cpu_s, fsize)


def hook_events(log):
    p = Path(log)
    return p.read_text().splitlines() if p.exists() else []


def _arg(a):
    return os.fsdecode(a) if isinstance(a, bytes) else str(a)


def _home_for(cwd):
    """`<tmp>/home` of the test whose tmp folder holds `cwd` (marked by the `work` fixture)."""
    p = Path(os.path.abspath(cwd))
    for parent in [p, *p.parents]:
        if (parent / ".sg-test-root").exists():
            return parent / "home"
    return p.parent / "home"


# --- assertions ---------------------------------------------------------------------------------------------------


def assert_no_crash(res, rcs=(0, 1, 2)):
    assert "Traceback" not in res.stderr, f"traceback: {res!r}"
    assert "Traceback" not in res.stdout, f"traceback on stdout: {res!r}"
    for word in ("MemoryError", "RecursionError", "Segmentation fault", "Fatal Python error"):
        assert word not in res.stderr, f"{word}: {res!r}"
    assert res.rc >= 0, f"killed by signal {-res.rc} (rlimit?): {res!r}"
    assert res.rc in rcs, f"rc {res.rc} not in {rcs}: {res!r}"


def error_lines(res):
    return [ln for ln in res.stderr.splitlines() if ln.strip() and ": note:" not in ln and ": warning:" not in ln]


def assert_one_line_error(res):
    assert_no_crash(res, (2,))
    errs = error_lines(res)
    assert len(errs) == 1, f"expected one error line, got {len(errs)}: {res!r}"
    assert len(errs[0]) < 2000, f"error line too long ({len(errs[0])} chars): {res!r}"


def json_findings(res, root):
    """(path relative to root, code, row) of each finding of a `--output-format json` run."""
    try:
        data = json.loads(res.out)
    except ValueError:
        pytest.fail(f"stdout is not JSON: {res!r}")
    root = os.path.realpath(root)
    found = set()
    for f in data:
        name = f["filename"]
        rel = os.path.relpath(os.path.realpath(os.fsencode(name)), os.fsencode(root))
        found.add((os.fsdecode(rel), f["code"], f["location"]["row"]))
    return found


def assert_good_findings(res, root, expected=GOOD_FINDINGS):
    """The good files' findings are all reported (others may be reported too)."""
    assert_no_crash(res, (1,))
    got = json_findings(res, root)
    missing = set(expected) - got
    assert not missing, f"lost findings {sorted(missing)}; got {sorted(got)}: {res!r}"


# --- trees --------------------------------------------------------------------------------------------------------


def write_tree(root, files):
    root = Path(root)
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


def make_project(root, files=None, git=True):
    """A project folder (root marked by `.git`) holding the three good files plus `files`."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    if git:
        (root / ".git").mkdir(exist_ok=True)
    write_tree(root, GOOD_FILES)
    if files:
        write_tree(root, files)
    return root


def snapshot(path):
    """Every entry under `path` (not following links) with its type, bytes, mode and owner."""
    path = Path(path)
    out = {}
    if not os.path.lexists(path):
        return out
    for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            rel = str(p.relative_to(path))
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", st.st_mode, st.st_uid)
            elif p.is_file():
                out[rel] = ("file", p.read_bytes(), st.st_mode, st.st_uid, st.st_nlink)
            else:
                out[rel] = ("other", st.st_mode)
    return out


def chown_tree(path, uid=OTHER_UID, gid=OTHER_GID):
    path = Path(path)
    os.lchown(path, uid, gid)
    if path.is_dir() and not path.is_symlink():
        for dirpath, dirnames, filenames in os.walk(path):
            for name in dirnames + filenames:
                os.lchown(os.path.join(dirpath, name), uid, gid)


# --- the vLLM source ----------------------------------------------------------------------------------------------


def ensure_vllm():
    dest = VLLM_CACHE / f"vllm-{VLLM_VERSION}"
    pkg = dest / "vllm"
    if (pkg / "engine" / "arg_utils.py").is_file() and (pkg / "config" / "__init__.py").is_file():
        return pkg
    whl_dir = VLLM_CACHE / "whl"
    whl_dir.mkdir(parents=True, exist_ok=True)
    wheels = sorted(whl_dir.glob(f"vllm-{VLLM_VERSION}-*.whl"))
    if not wheels:
        r = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", f"vllm=={VLLM_VERSION}", "-d", str(whl_dir)],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        wheels = sorted(whl_dir.glob(f"vllm-{VLLM_VERSION}-*.whl"))
        if not wheels:
            pytest.fail(f"cannot set up: pip download vllm=={VLLM_VERSION} failed: {r.stderr[-2000:]}")
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(wheels[0]) as z:
        for name in z.namelist():
            if name.startswith("vllm/") and name.endswith(".py"):
                z.extract(name, tmp)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return pkg


def copy_vllm(src, dest):
    """A private copy of the vLLM package at `dest` (a `vllm` folder)."""
    shutil.copytree(src, dest, symlinks=True)
    return Path(dest)


DSPARK_DCP_YAML = textwrap.dedent(
    """\
    model: moonshotai/Kimi-K3
    tensor-parallel-size: 8
    decode-context-parallel-size: 8
    cp-kv-cache-interleave-size: 16
    block-size: 64
    attention-backend: FLASHINFER_MLA
    speculative-config: '{"method": "dspark", "model": "moonshotai/Kimi-K3-DSpark", "num_speculative_tokens": 7, "attention_backend": "FLASHINFER_MLA"}'
    compilation-config:
      cudagraph_mode: FULL_AND_PIECEWISE
    """
)
DSPARK_CODES = {"CFG102", "CFG104"}


def config_codes(res):
    """The hazard codes of a `specguard config --format json` run."""
    try:
        data = json.loads(res.out)
    except ValueError:
        pytest.fail(f"stdout is not JSON: {res!r}")
    return {f["code"] for f in data}


def is_one_line(text):
    return "\n" not in text.rstrip("\n")


CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
