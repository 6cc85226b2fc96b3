"""Harness of the blind security tests (round 1).

Every run of specguard happens in a child process (``sys.executable -m specguard`` or the hook driver
``_hookdriver.py``, which runs the same ``__main__`` in-process after patching low-level functions),
bounded by RLIMIT_AS / RLIMIT_CPU (and RLIMIT_FSIZE when asked). A wall-clock ``timeout`` is only a
safety net: a run that hits it is reported as such and the test fails on it.

HOME and XDG_CACHE_HOME point into the test's own temporary folder, so nothing outside it is touched.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PY = sys.executable
GiB = 1024**3
NOBODY = 65534
HERE = Path(__file__).resolve().parent
HOOK_DRIVER = HERE / "_hookdriver.py"
BLIND_CACHE = Path.home() / ".cache" / "blind-sec"
VLLM_VERSION = "0.33.0"

# --------------------------------------------------------------------------------------------------
# Sources with real findings: the rules' own bad examples (`specguard explain SG101/SG103`) and the
# SG201 merge of examples/myfork (whose fix is safe, so `--fix` writes it).
# --------------------------------------------------------------------------------------------------

SG101_BAD = textwrap.dedent(
    """\
    import functools

    from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
    from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

    class MyDraftSpeculator(DraftModelSpeculator):
        def propose(self, num_reqs, batch_desc):
            return build_attn_metadata(attn_groups=self.attn_groups, num_reqs=num_reqs)  # SG101
    """
)

SG103_BAD = textwrap.dedent(
    """\
    from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
    from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

    class MyDraftSpeculator(DraftModelSpeculator):
        def propose(self, num_reqs, num_tokens):
            batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
            return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=batch_desc.num_tokens)
    """
)

SG103_FIXED = textwrap.dedent(
    """\
    from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
    from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

    class MyDraftSpeculator(DraftModelSpeculator):
        def propose(self, num_reqs, num_tokens):
            batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
            return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=num_tokens)
    """
)

SG201_BAD = textwrap.dedent(
    """\
    from dataclasses import dataclass


    @dataclass(frozen=True)
    class AttentionSpec:
        block_size: int
        non_causal_multi_token_decode: bool = False


    @dataclass(frozen=True)
    class MLAAttentionSpec(AttentionSpec):
        @classmethod
        def merge(cls, specs):
            return cls(
                block_size=specs[0].block_size,
                non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs),
            )
    """
)

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

DFLASH_DP2_YAML = textwrap.dedent(
    """\
    model: Qwen/Qwen3-8B
    data-parallel-size: 2
    tensor-parallel-size: 1
    speculative-config:
      method: dflash
      model: z-lab/Qwen3-8B-DFlash-b16
      num_speculative_tokens: 15
    """
)

OLD_MTIME = 1_600_000_000  # files older than the cache's two-second window


# --------------------------------------------------------------------------------------------------
# Running the tool
# --------------------------------------------------------------------------------------------------


@dataclass
class Result:
    args: list
    rc: int
    out_b: bytes
    err_b: bytes
    timed_out: bool = False
    cpu_s: float = 0.0
    maxrss_kb: int = 0
    report: dict = field(default_factory=dict)

    @property
    def out(self) -> str:
        return self.out_b.decode("utf-8", "replace")

    @property
    def err(self) -> str:
        return self.err_b.decode("utf-8", "replace")

    @property
    def limit_hit(self) -> str | None:
        """Why the run did not end on its own terms, or None."""
        if self.timed_out:
            return "wall-clock safety timeout (the run hung)"
        if self.rc == -signal.SIGXCPU or self.rc == -signal.SIGKILL:
            return f"RLIMIT_CPU hit (signal {-self.rc})"
        if self.rc == -signal.SIGXFSZ:
            return "RLIMIT_FSIZE hit (SIGXFSZ)"
        if self.rc < 0:
            return f"killed by signal {-self.rc}"
        if b"MemoryError" in self.err_b:
            return "RLIMIT_AS hit (MemoryError)"
        return None

    def describe(self) -> str:
        return (
            f"args={self.args!r}\nrc={self.rc} limit={self.limit_hit} cpu={self.cpu_s:.1f}s "
            f"maxrss={self.maxrss_kb // 1024}MiB\n--- stdout (tail) ---\n{self.out[-3000:]}\n"
            f"--- stderr (tail) ---\n{self.err[-3000:]}\n--- hook report ---\n{json.dumps(self.report)[:2000]}"
        )


def make_env(home: Path, extra: dict | None = None) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SPECGUARD", "VLLM_", "PYTHON", "PIP_", "XDG_", "PYTEST"))
    }
    home.mkdir(parents=True, exist_ok=True)
    env["HOME"] = str(home)
    env["XDG_CACHE_HOME"] = str(home / ".cache")
    env["LANG"] = "C.UTF-8"
    env["LC_ALL"] = "C.UTF-8"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if extra:
        env.update(extra)
    return env


def _preexec(as_bytes, cpu_s, fsize):
    def pre():
        if as_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))
        if cpu_s:
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
        if fsize:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return pre


def _run(cmd, cwd, env, as_bytes, cpu_s, fsize, timeout, stdin=None) -> Result:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(
        cmd,
        cwd=str(cwd),
        env=env,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_preexec(as_bytes, cpu_s, fsize),
        start_new_session=True,
    )
    timed_out = False
    try:
        out, err = proc.communicate(input=stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
    # reap anything the tool left in its session
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Result(
        args=[os.fsdecode(c) if isinstance(c, bytes) else str(c) for c in cmd[1:]],
        rc=proc.returncode,
        out_b=out,
        err_b=err,
        timed_out=timed_out,
        cpu_s=cpu,
        maxrss_kb=after.ru_maxrss,
    )


def run_cli(
    args,
    cwd,
    home: Path,
    env: dict | None = None,
    as_bytes: int = 2 * GiB,
    cpu_s: int = 60,
    fsize: int | None = None,
    timeout: float = 300,
) -> Result:
    cmd = [PY, "-m", "specguard", *args]
    return _run(cmd, cwd, make_env(home, env), as_bytes, cpu_s, fsize, timeout)


def run_hooked(
    hook: dict,
    args,
    cwd,
    home: Path,
    env: dict | None = None,
    as_bytes: int = 2 * GiB,
    cpu_s: int = 60,
    timeout: float = 300,
) -> Result:
    """Run ``python -m specguard ARGS`` in-process in a child, after the hook driver patched os/io."""
    Path(home).mkdir(parents=True, exist_ok=True)
    cfg_path = Path(home) / f"hook-{uuid.uuid4().hex}.json"
    report_path = cfg_path.with_suffix(".report.json")
    hook = dict(hook, report=str(report_path))
    cfg_path.write_text(json.dumps(hook))
    cmd = [PY, str(HOOK_DRIVER), str(cfg_path), *args]
    res = _run(cmd, cwd, make_env(home, env), as_bytes, cpu_s, None, timeout)
    res.args = list(args)
    if report_path.exists():
        try:
            res.report = json.loads(report_path.read_text())
        except ValueError:
            res.report = {"fired": False, "errors": ["unreadable report"]}
    else:
        res.report = {"fired": False, "errors": ["no report written (driver died?)"]}
    return res


# --------------------------------------------------------------------------------------------------
# Assertions
# --------------------------------------------------------------------------------------------------


def assert_sane(res: Result, rcs=(0, 1)):
    """No traceback, no limit hit, an exit code in ``rcs``."""
    assert res.limit_hit is None, f"resource bound hit: {res.limit_hit}\n{res.describe()}"
    assert "Traceback (most recent call last)" not in res.err, f"traceback on stderr\n{res.describe()}"
    assert "Traceback (most recent call last)" not in res.out, f"traceback on stdout\n{res.describe()}"
    assert res.rc in rcs, f"exit code {res.rc}, expected one of {rcs}\n{res.describe()}"


def assert_one_line_error(res: Result):
    """Exit 2 with exactly one `specguard: ...error...` line, short, and nothing that is not specguard's."""
    assert_sane(res, rcs=(2,))
    lines = [ln for ln in res.err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("specguard") and "error" in ln.lower()]
    assert len(errors) == 1, f"expected exactly one error line on stderr, got {len(errors)}\n{res.describe()}"
    assert len(errors[0]) <= 2000, f"error line is {len(errors[0])} characters long\n{res.describe()}"
    stray = [ln for ln in lines if not ln.startswith("specguard")]
    assert not stray, f"stderr lines that are not specguard's messages: {stray[:5]!r}\n{res.describe()}"


def findings(res: Result, root: Path):
    """The findings of a `--output-format json` run, as sorted (code, path from root, row, col)."""
    try:
        data = json.loads(res.out_b.decode("utf-8"))
    except ValueError as exc:
        raise AssertionError(f"stdout is not JSON ({exc})\n{res.describe()}") from None
    assert isinstance(data, list), f"JSON output is not a list\n{res.describe()}"
    rows = []
    for f in data:
        rows.append(
            (f["code"], os.path.relpath(f["filename"], str(root)), f["location"]["row"], f["location"]["column"])
        )
    return sorted(rows)


def check_json(args, cwd, home, root, **kw):
    res = run_cli([*args, "--output-format", "json"], cwd, home, **kw)
    return res, (findings(res, root) if res.rc in (0, 1) and res.limit_hit is None else None)


# --------------------------------------------------------------------------------------------------
# Files and trees
# --------------------------------------------------------------------------------------------------


def write(path: Path, text, mtime: int | None = OLD_MTIME):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode() if isinstance(text, str) else text
    path.write_bytes(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def replace_file(path: Path, data: bytes):
    """Replace a file without writing through a hard link (the vLLM copies are hard-linked)."""
    path = Path(path)
    if path.exists() or path.is_symlink():
        path.unlink()
    path.write_bytes(data)


def snapshot(root) -> dict:
    """Every entry below root, not following links: type, mode, owner, bytes or link target."""
    root = os.fsencode(str(root))
    snap = {}
    if not os.path.lexists(root):
        return {"<missing>": True}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                snap[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as fh:
                    snap[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_uid, fh.read())
            elif stat.S_ISDIR(st.st_mode):
                snap[rel] = ("dir", stat.S_IMODE(st.st_mode), st.st_uid)
            else:
                snap[rel] = ("other", st.st_mode)
    st = os.lstat(root)
    snap[b"."] = ("root", stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode))
    return snap


def diff_snapshots(a: dict, b: dict) -> list:
    out = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            out.append((k, "before" if k in a else "-", "after" if k in b else "-"))
    return out


def chown_tree(path, uid=NOBODY, gid=NOBODY):
    path = str(path)
    os.lchown(path, uid, gid)
    if os.path.isdir(path) and not os.path.islink(path):
        for dirpath, dirnames, filenames in os.walk(path):
            for n in dirnames + filenames:
                os.lchown(os.path.join(dirpath, n), uid, gid)


def copy_tree(src, dst, hardlink=False):
    if hardlink:
        shutil.copytree(src, dst, symlinks=True, copy_function=os.link)
    else:
        shutil.copytree(src, dst, symlinks=True)
    return Path(dst)


def age_tree(root, mtime=OLD_MTIME):
    for dirpath, dirnames, filenames in os.walk(root):
        for n in filenames:
            p = os.path.join(dirpath, n)
            if not os.path.islink(p):
                os.utime(p, (mtime, mtime))


def cache_files(root) -> list:
    return sorted(str(p) for p in Path(root).rglob("*.msgpack"))


def decode_msgpack(path):
    import msgspec

    return msgspec.msgpack.decode(Path(path).read_bytes())


def encode_msgpack(obj) -> bytes:
    import msgspec

    return msgspec.msgpack.encode(obj)


def forge_drop_findings(obj):
    """Edit decoded cache data: every list of findings/judgements becomes empty, every scan says 'nothing'."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k in ("judgements", "mentions", "call_owners") and isinstance(v, list):
                out[k] = []
            elif k == "classes" and isinstance(v, dict):
                out[k] = {}
            elif k == "functions" and isinstance(v, dict):
                out[k] = {}
            else:
                out[k] = forge_drop_findings(v)
        return out
    if isinstance(obj, list):
        if obj and isinstance(obj[0], str) and obj[0] == "results" and len(obj) == 3 and isinstance(obj[2], dict):
            return [obj[0], obj[1], {k: [] for k in obj[2]}]
        if obj and all(isinstance(x, dict) and "code" in x and "line" in x for x in obj):
            return []
        return [forge_drop_findings(x) for x in obj]
    return obj


def forge_cache_folder(cache_root):
    """Rewrite every msgpack file under cache_root with its findings dropped. Returns how many changed."""
    changed = 0
    for f in cache_files(cache_root):
        data = decode_msgpack(f)
        forged = forge_drop_findings(data)
        if forged != data:
            changed += 1
        Path(f).write_bytes(encode_msgpack(forged))
    return changed


# --------------------------------------------------------------------------------------------------
# vLLM 0.33.0 source (pip download, unzipped once under ~/.cache/blind-sec)
# --------------------------------------------------------------------------------------------------


def _ensure_vllm_source() -> Path:
    dest = BLIND_CACHE / f"vllm-{VLLM_VERSION}"
    marker = dest / "vllm" / "config" / "vllm.py"
    if marker.exists():
        return dest
    whl_dir = BLIND_CACHE / "whl"
    whl_dir.mkdir(parents=True, exist_ok=True)
    wheels = sorted(whl_dir.glob(f"vllm-{VLLM_VERSION}-*.whl"))
    if not wheels:
        proc = subprocess.run(
            [PY, "-m", "pip", "download", "--no-deps", f"vllm=={VLLM_VERSION}", "-d", str(whl_dir)],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        wheels = sorted(whl_dir.glob(f"vllm-{VLLM_VERSION}-*.whl"))
        if not wheels:
            pytest.fail(
                f"cannot set up the attack: pip download of vllm=={VLLM_VERSION} failed:\n{proc.stderr[-2000:]}"
            )
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(wheels[-1]) as z:
        for info in z.infolist():
            if info.filename.startswith("vllm/") and info.filename.endswith(".py") and ".." not in info.filename:
                z.extract(info, tmp)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


@pytest.fixture(scope="session")
def vllm_src() -> Path:
    """The pristine unpacked vLLM 0.33.0 (a folder holding `vllm/`). Never modify it: copy it."""
    return _ensure_vllm_source()


@pytest.fixture
def vllm_copy(vllm_src, tmp_path) -> Path:
    """A hard-linked copy of vLLM 0.33.0 in the test's folder: replace files with replace_file, never edit."""
    return copy_tree(vllm_src, tmp_path / "served", hardlink=True)


@pytest.fixture
def home(tmp_path) -> Path:
    h = tmp_path / "home"
    h.mkdir(exist_ok=True)
    return h


@pytest.fixture(scope="session")
def vllm_clean_verdict(vllm_src, tmp_path_factory):
    """specguard config on the pristine 0.33.0 copy with the DSpark/DCP config: the reference verdict."""
    d = tmp_path_factory.mktemp("clean-verdict")
    cfg = write(d / "dspark-dcp.yaml", DSPARK_DCP_YAML)
    h = d / "home"
    res = run_cli(["config", str(cfg), "--vllm-source", str(vllm_src), "--format", "json"], d, h)
    assert res.rc == 1, f"reference run on pristine vLLM {VLLM_VERSION} did not find its hazards\n{res.describe()}"
    codes = sorted(f["code"] for f in json.loads(res.out))
    return codes


def config_codes(res: Result) -> list:
    try:
        data = json.loads(res.out_b.decode("utf-8"))
    except ValueError as exc:
        raise AssertionError(f"config --format json printed no JSON ({exc})\n{res.describe()}") from None
    return sorted(f["code"] for f in data)


FINDING_RE = re.compile(r"^(?P<path>.+?):(?P<row>\d+):(?P<col>\d+): (?P<code>SG\d{3}) ")
