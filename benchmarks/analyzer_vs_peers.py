#!/usr/bin/env python3
"""How fast `specguard check` is on a real vLLM release, against ruff, fixit and semgrep, in one run.

    python benchmarks/analyzer_vs_peers.py [--vllm-version 0.33.0] [--repeat N] [--skip-slow] [--json FILE]
    python benchmarks/analyzer_vs_peers.py --sglang-version 0.5.23   # SGLang's release, against ruff only

The targets (issue #20 tightened the first two), on the full tree and on the 2-core machine every developer and
CI has:

    specguard cold (--no-cache)      <= 1.5 x  ruff check --no-cache --select E9
    specguard warm (cache, no edit)  <= 0.4 x  ruff check --no-cache --select E9
    fixit, one SG101-like rule       >= 100 x  specguard cold
    semgrep, one SG101-like rule     >=   5 x  specguard cold

What it does:
  1. takes the release's Python sources the tests use (tests/conftest.py's `unpacked_vllm`, cached under
     ~/.cache/specguard/vllm-src/VERSION) and copies them into a temp folder, so that every tool reads the
     same files and no config file from elsewhere applies;
  2. installs the peers, pinned, and specguard itself (non-editable, from a copy of this working tree)
     into one venv, ~/.cache/specguard/bench-venv, and runs every tool from that venv's bin/ (no shims);
  3. checks that the fixit and semgrep one-rule configs (benchmarks/peers/) fire on a small bad file;
  4. times each tool as its own process on the whole tree: wall clock, best of N, with its CPU time and
     its peak memory (the largest single process, from wait4, and the whole process tree, sampled);
  5. prints a table, the four ratios with PASS/MISS, and the finding counts that show each tool really
     analyzed the tree; --json FILE writes the same as JSON.

Timings are wall clock on a machine that may be shared: run it twice when a number looks off. Nothing here
belongs in a unit test: a wall-clock assertion in a test is flaky by construction.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import results as results_file  # benchmarks/results.py, beside this script

REPO = Path(__file__).resolve().parent.parent
PEERS = REPO / "benchmarks" / "peers"
# Under SPECGUARD_CACHE when set, like the CI venvs: a shared machine's engineers each install their own tree.
VENV = Path(os.environ.get("SPECGUARD_CACHE") or Path.home() / ".cache" / "specguard") / "bench-venv"

# Pinned peers. semgrep 1.170.1 is the newest release that installs beside fixit 2.2.1: semgrep >= 1.171
# needs click 8.4 and fixit 2.2.1 needs click < 8.2.
PINS = ["ruff==0.17.6", "semgrep==1.170.1", "fixit==2.2.1"]

TARGETS = {
    # name: (numerator, denominator, comparison, bound)
    "specguard cold / ruff": ("specguard-cold", "ruff", "<=", 1.5),
    "specguard warm / ruff": ("specguard-warm", "ruff", "<=", 0.4),
    "fixit / specguard cold": ("fixit", "specguard-cold", ">=", 100.0),
    "semgrep / specguard cold": ("semgrep", "specguard-cold", ">=", 5.0),
}

# The smallest file each SG101-like peer rule must flag (line 6) and leave alone (lines 9, 12, 15).
BAD_EXAMPLE = """\
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

class MyDraftSpeculator(DraftModelSpeculator):
    def propose(self, num_reqs, batch_desc):
        return build_attn_metadata(attn_groups=self.attn_groups, num_reqs=num_reqs)

    def capture(self):
        return build_attn_metadata(attn_groups=self.attn_groups, for_cudagraph_capture=True)

    def other(self):
        return self.builder.build_attn_metadata(1)

def free():
    return build_attn_metadata(1)
"""
BAD_EXAMPLE_LINES = [6]

FIXIT_CONFIG = """\
[tool.fixit]
root = true
# Only the one local rule: fixit enables its own rule set unless told not to.
disable = ["fixit.rules"]
enable = ["fixit_sg101"]
"""


def log(msg: str) -> None:
    print(msg, flush=True)


# --------------------------------------------------------------------------------------------- the tree


def vllm_tree(version: str) -> Path:
    sys.path.insert(0, str(REPO / "tests"))
    from conftest import unpacked_vllm  # noqa: PLC0415 - the tests' own download-and-cache helper

    return unpacked_vllm(version)


def sglang_tree(version: str) -> Path:
    sys.path.insert(0, str(REPO / "tests"))
    from conftest import unpacked  # noqa: PLC0415 - the tests' own download-and-cache helper

    return unpacked("sglang", version)


def tree_size(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*.py") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


# --------------------------------------------------------------------------------------------- the venv


def venv_bin(name: str) -> Path:
    return VENV / "bin" / name


def pip_install(pip: list[str], *args: str) -> None:
    """Quiet unless it fails: a build backend's deprecation notices are not benchmark output."""
    done = subprocess.run([*pip, "install", *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"pip install {' '.join(args)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")


def ensure_venv() -> dict[str, str]:
    """The peers, pinned, and this working tree's specguard, in one venv. Returns the tools' versions."""
    py = venv_bin("python")
    if not py.exists():
        log(f"creating {VENV}")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(py), "-m", "pip", "--disable-pip-version-check", "--quiet"]
    marker = VENV / ".bench-pins"
    if not marker.exists() or marker.read_text() != "\n".join(PINS):
        log(f"installing {' '.join(PINS)} into {VENV}")
        pip_install(pip, *PINS)
        marker.write_text("\n".join(PINS))
    # specguard from a copy of the working tree as it is now (uncommitted edits included), built outside
    # the repo so no build/ folder lands in it; dependencies only when missing, the package always anew.
    with tempfile.TemporaryDirectory(prefix="specguard-src-") as tmp:
        src = Path(tmp) / "specguard"
        shutil.copytree(
            REPO,
            src,
            ignore=shutil.ignore_patterns(
                ".git",
                "__pycache__",
                "*.egg-info",
                "build",
                "dist",
                ".venv",
                ".specguard_cache",
                ".pytest_cache",
                ".hypothesis",
                "benchmarks",
            ),
        )
        log("installing specguard (non-editable) from the working tree")
        pip_install(pip, str(src))
        pip_install(pip, "--no-deps", "--force-reinstall", str(src))
    versions = {}
    for tool in ("ruff", "semgrep", "fixit", "specguard"):
        if tool == "specguard":
            out = subprocess.run(
                [str(py), "-c", "import specguard; print(specguard.__version__)"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        else:
            out = subprocess.run(
                [str(venv_bin(tool)), "--version"], capture_output=True, text=True, env=tool_env(), check=True
            ).stdout
        words = out.strip().splitlines()[-1].split() if out.strip() else ["?"]
        versions[tool] = words[-1]  # "ruff 0.17.6", "fixit, version 2.2.1", "1.170.1": the number
    return versions


def tool_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(VENV)
    env["PYTHONPATH"] = str(PEERS)  # fixit imports the local rule `fixit_sg101` from here
    env["SEMGREP_ENABLE_VERSION_CHECK"] = "0"
    env["SEMGREP_SEND_METRICS"] = "off"
    env.pop("PYTHONSTARTUP", None)
    return env


# --------------------------------------------------------------------------------------------- a timed run


@dataclass
class Run:
    seconds: float
    cpu_seconds: float
    max_process_rss_mb: float  # the largest single process of the tree (wait4's ru_maxrss)
    tree_rss_mb: float  # the whole process tree's RSS, sampled every 50 ms
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                kids.extend(int(k) for k in fh.read().split())
    except OSError:
        pass
    return kids


def _tree_rss_kb(root: int) -> int:
    total, stack, seen = 0, [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/statm") as fh:
                total += int(fh.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
        except (OSError, IndexError, ValueError):
            continue
        stack.extend(_children(pid))
    return total


def timed(cmd: list[str], cwd: Path, timeout: float | None = None) -> Run:
    """One run of cmd. Past `timeout` seconds its whole process group is killed and the run is marked."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=tool_env(), stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True
        )
        peak = [0]
        done = threading.Event()
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, kill) if timeout else None
        if timer is not None:
            timer.start()

        def sample() -> None:
            while not done.wait(0.05):
                peak[0] = max(peak[0], _tree_rss_kb(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        if timer is not None:
            timer.cancel()
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Run(
            seconds,
            usage.ru_utime + usage.ru_stime,
            usage.ru_maxrss / 1024,
            max(peak[0], usage.ru_maxrss) / 1024,
            proc.returncode,
            out.read(),
            err.read(),
            killed.is_set(),
        )


@dataclass
class Result:
    tool: str
    command: str
    runs: list[float] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    max_process_rss_mb: float = 0.0
    tree_rss_mb: float = 0.0
    findings: int | None = None
    files_seen: int | None = None
    ok: bool = True
    note: str = ""
    timed_out: bool = False  # killed at the time limit: `seconds` is a lower bound


def best_of(tool: str, cmd: list[str], cwd: Path, repeat: int, check, timeout: float | None = None) -> Result:
    """Best wall clock of `repeat` runs; `check(run)` returns (ok, findings, files_seen, note) for each.

    A run killed at `timeout` stops the repeats; its time stands as a lower bound."""
    shown = " ".join(Path(c).name if i == 0 else c for i, c in enumerate(cmd))
    result = Result(tool, shown)
    best: Run | None = None
    for i in range(repeat):
        run = timed(cmd, cwd, timeout)
        if run.timed_out:
            log(
                f"  {tool:16} run {i + 1}/{repeat}: killed after {run.seconds:.0f} s (--slow-timeout); "
                f"its time is a lower bound"
            )
            result.runs.append(round(run.seconds, 3))
            result.seconds, result.cpu_seconds, result.timed_out = run.seconds, run.cpu_seconds, True
            result.max_process_rss_mb = max(result.max_process_rss_mb, run.max_process_rss_mb)
            result.tree_rss_mb = max(result.tree_rss_mb, run.tree_rss_mb)
            result.note = f"killed after {run.seconds:.0f} s"
            return result
        ok, findings, files_seen, note = check(run)
        log(
            f"  {tool:16} run {i + 1}/{repeat}: {run.seconds:8.2f} s  cpu {run.cpu_seconds:8.2f} s  "
            f"rss {run.max_process_rss_mb:7.0f} MB (tree {run.tree_rss_mb:7.0f} MB)  rc {run.returncode}"
            f"  findings {findings}" + ("" if ok else f"  FAILED: {note}")
        )
        if not ok:
            tail = (run.stderr or run.stdout)[-2000:]
            log(f"    output tail:\n{tail}")
        result.runs.append(round(run.seconds, 3))
        result.ok = result.ok and ok
        result.findings, result.files_seen, result.note = findings, files_seen, note
        result.max_process_rss_mb = max(result.max_process_rss_mb, run.max_process_rss_mb)
        result.tree_rss_mb = max(result.tree_rss_mb, run.tree_rss_mb)
        if best is None or run.seconds < best.seconds:
            best = run
    assert best is not None
    result.seconds, result.cpu_seconds = best.seconds, best.cpu_seconds
    return result


# --------------------------------------------------------------------------------------------- output checks


def check_ruff(run: Run) -> tuple[bool, int | None, int | None, str]:
    if run.returncode not in (0, 1):  # 1: E9 findings (syntax errors), 2: ruff itself failed
        return False, None, None, f"ruff exited {run.returncode}"
    m = re.search(r"Found (\d+) error", run.stdout + run.stderr)
    return True, int(m.group(1)) if m else 0, None, ""


_SG_LINE = re.compile(r"^.+:\d+:\d+: (SG\d+) ", re.M)


def check_specguard(run: Run) -> tuple[bool, int | None, int | None, str]:
    if run.returncode not in (0, 1):  # 2 is specguard's "could not run"
        return False, None, None, f"specguard exited {run.returncode}: {run.stderr.strip()[-300:]}"
    codes = _SG_LINE.findall(run.stdout)
    by_code = {c: codes.count(c) for c in sorted(set(codes))}
    return True, len(codes), None, ", ".join(f"{c}: {n}" for c, n in by_code.items())


def check_fixit(run: Run) -> tuple[bool, int | None, int | None, str]:
    text = run.stdout + run.stderr
    if run.returncode not in (0, 1) or "Traceback" in text:
        return False, None, None, f"fixit exited {run.returncode}"
    findings = len(re.findall(r"MetadataOutsideHelper", run.stdout))
    m = re.search(r"(\d+) files? checked", text) or re.search(r"(\d+) files? clean", text)
    errors = len(re.findall(r"^.+: (?:EXCEPTION|ERROR)", text, re.M))
    return True, findings, int(m.group(1)) if m else None, f"{errors} files fixit could not lint" if errors else ""


def check_semgrep(run: Run) -> tuple[bool, int | None, int | None, str]:
    if run.returncode not in (0, 1):
        return False, None, None, f"semgrep exited {run.returncode}"
    try:
        data = json.loads(run.stdout)
    except json.JSONDecodeError:
        return False, None, None, "semgrep printed no JSON"
    scanned = len(data.get("paths", {}).get("scanned", []))
    errors = data.get("errors", [])
    return True, len(data.get("results", [])), scanned, f"{len(errors)} semgrep errors" if errors else ""


# --------------------------------------------------------------------------------------------- the peer rules fire


def fixit_cmd(target: str) -> list[str]:
    return [str(venv_bin("fixit")), "--config-file", "fixit.toml", "lint", target]


def semgrep_cmd(target: str) -> list[str]:
    # --max-target-bytes 0: no size cap, so semgrep skips no large vLLM file the other tools read.
    return [
        str(venv_bin("semgrep")),
        "scan",
        "--config",
        str(PEERS / "semgrep_sg101.yaml"),
        "--metrics=off",
        "--disable-version-check",
        "--jobs",
        "2",
        "--max-target-bytes",
        "0",
        "--json",
        target,
    ]


def verify_peer_rules(skip_fixit: bool) -> None:
    """Each one-rule peer config must flag the bad example's line 6 and nothing else, or the timing is moot."""
    with tempfile.TemporaryDirectory(prefix="specguard-peers-") as tmp:
        work = Path(tmp)
        (work / "vllm").mkdir()
        (work / "vllm" / "bad_speculator.py").write_text(BAD_EXAMPLE)
        (work / "fixit.toml").write_text(FIXIT_CONFIG)
        if not skip_fixit:
            run = timed(fixit_cmd("vllm"), work)
            lines = [int(m) for m in re.findall(r"bad_speculator\.py@(\d+):\d+ MetadataOutsideHelper", run.stdout)]
            if lines != BAD_EXAMPLE_LINES:
                sys.exit(
                    f"fixit's SG101 rule flagged lines {lines}, expected {BAD_EXAMPLE_LINES}:\n{run.stdout}{run.stderr}"
                )
            log(f"  fixit rule fires on the bad example: lines {lines}")
        run = timed(semgrep_cmd("vllm"), work)
        try:
            lines = [r["start"]["line"] for r in json.loads(run.stdout)["results"]]
        except (json.JSONDecodeError, KeyError):
            lines = None
        if lines != BAD_EXAMPLE_LINES:
            sys.exit(f"semgrep's SG101 rule flagged lines {lines}, expected {BAD_EXAMPLE_LINES}:\n{run.stderr[-2000:]}")
        log(f"  semgrep rule fires on the bad example: lines {lines}")


# --------------------------------------------------------------------------------------------- main


def peer_summary(name: str, r: Result, coverage: str) -> str:
    """One line on a peer's run: its findings and how much of the tree it covered, or why there is no count."""
    if r.timed_out:
        return f"{name}: {r.note} (--slow-timeout), no findings count"
    note = f", {r.note}" if r.note else ""
    return f"{name}: {'ok' if r.ok else 'FAILED'}, {r.findings} findings, {coverage}{note}"


def summary(
    started: datetime,
    framework: str,
    version: str,
    files: int,
    size: int,
    cores: int | None,
    load: tuple[float, ...],
    results: dict[str, Result],
    ratios: dict[str, dict],
) -> dict:
    """A run as benchmarks/results.json keeps it: the figures the docs quote, rounded as the report prints them."""
    return {
        "script": "benchmarks/analyzer_vs_peers.py",
        "date": started.isoformat(timespec="minutes"),
        f"{framework}_version": version,
        "files": files,
        "megabytes": round(size / 1e6),
        "cores": cores,
        "load_average_at_start": round(load[0], 1),
        "seconds": {k: round(r.seconds, 2) for k, r in results.items()},
        "cpu_seconds": {k: round(r.cpu_seconds, 2) for k, r in results.items()},
        "max_process_mb": {k: round(r.max_process_rss_mb) for k, r in results.items()},
        "findings": {k: r.findings for k, r in results.items()},
        "ratios": {k: v["ratio"] for k, v in ratios.items() if v["ratio"] is not None},
        "verdicts": {k: v["verdict"] for k, v in ratios.items()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm-version", default="0.33.0")
    ap.add_argument(
        "--sglang-version",
        help="time SGLang's release instead, against ruff only (the peers' one-rule configs are vLLM's class)",
    )
    ap.add_argument("--repeat", type=int, default=3, help="runs of ruff and specguard; the best counts (3)")
    ap.add_argument("--slow-repeat", type=int, default=1, help="runs of fixit and semgrep (1)")
    ap.add_argument("--skip-slow", action="store_true", help="leave fixit out (it parses every file with libcst)")
    ap.add_argument(
        "--slow-timeout",
        type=float,
        default=1800.0,
        help="kill fixit or semgrep after this many seconds and take that as a lower bound (1800)",
    )
    ap.add_argument("--json", type=Path, help="also write the results to this JSON file")
    results_file.add_record_options(ap)
    args = ap.parse_args(argv)

    started = datetime.now(timezone.utc)
    framework, version = ("sglang", args.sglang_version) if args.sglang_version else ("vllm", args.vllm_version)
    name = {"vllm": "vLLM", "sglang": "SGLang"}[framework]
    source = sglang_tree(version) if framework == "sglang" else vllm_tree(version)
    files, size = tree_size(source)
    log(f"{name} {version}: {files} Python files, {size / 1e6:.1f} MB ({source})")
    peers = framework == "vllm"
    versions = ensure_venv()
    log("tools: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0, 0, 0)
    log(f"machine: {cores} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")

    if peers:
        log("checking that the peers' one-rule configs fire")
        verify_peer_rules(args.skip_slow)

    results: dict[str, Result] = {}
    with tempfile.TemporaryDirectory(prefix="specguard-bench-") as tmp:
        work = Path(tmp)
        shutil.copytree(source, work / framework)
        (work / "fixit.toml").write_text(FIXIT_CONFIG)
        cache_dir = work / "sg-cache"

        log(
            f"timing on {work / framework} (best of {args.repeat} for ruff and specguard, "
            f"{args.slow_repeat} for fixit and semgrep)"
        )
        results["ruff"] = best_of(
            "ruff",
            [str(venv_bin("ruff")), "check", "--no-cache", "--select", "E9", framework],
            work,
            args.repeat,
            check_ruff,
        )
        sg = str(venv_bin("specguard"))
        results["specguard-cold"] = best_of(
            "specguard-cold", [sg, "check", framework, "--no-cache"], work, args.repeat, check_specguard
        )
        fill = timed([sg, "check", framework, "--cache-dir", str(cache_dir)], work)
        log(f"  specguard cache fill: {fill.seconds:8.2f} s  rc {fill.returncode}")
        warm = [sg, "check", framework, "--cache-dir", str(cache_dir)]
        results["specguard-warm"] = best_of("specguard-warm", warm, work, args.repeat, check_specguard)
        if peers and not args.skip_slow:
            results["fixit"] = best_of(
                "fixit", fixit_cmd("vllm"), work, args.slow_repeat, check_fixit, args.slow_timeout
            )
        if peers:
            results["semgrep"] = best_of(
                "semgrep", semgrep_cmd("vllm"), work, args.slow_repeat, check_semgrep, args.slow_timeout
            )

    # ------------------------------------------------------------------ report
    log("")
    log(f"{name} {version}, {files} files, {size / 1e6:.1f} MB; {cores} cores; {started:%Y-%m-%d %H:%M} UTC")
    header = f"{'tool':16} {'seconds':>9} {'cpu s':>8} {'max proc MB':>12} {'tree MB':>8} {'findings':>9}  runs"
    log(header)
    log("-" * len(header))
    for r in results.values():
        seconds = f"{'>' if r.timed_out else ''}{r.seconds:.2f}"
        log(
            f"{r.tool:16} {seconds:>9} {r.cpu_seconds:8.2f} {r.max_process_rss_mb:12.0f} {r.tree_rss_mb:8.0f} "
            f"{'-' if r.findings is None else r.findings:>9}  {r.runs}" + ("" if r.ok else "  FAILED")
        )
    log("")
    ratios = {}
    for name, (num, den, op, bound) in TARGETS.items():
        if num not in results or den not in results:
            ratios[name] = {"ratio": None, "target": f"{op} {bound}", "verdict": "SKIPPED"}
            log(f"{name:26} {'-':>11}  target {op} {bound:<6} SKIPPED")
            continue
        ratio = results[num].seconds / results[den].seconds
        # A peer killed at the time limit gives a lower bound on its ratio: enough for a ">=" target it
        # already meets, never for a "<=" one.
        bounded = results[num].timed_out or results[den].timed_out
        passed = ratio <= bound if op == "<=" else ratio >= bound
        if bounded and (op == "<=" or results[den].timed_out):
            passed = False
        verdict = "PASS" if passed and results[num].ok and results[den].ok else "MISS"
        shown = (">=" if bounded else "  ") + f"{ratio:8.2f}x"
        ratios[name] = {"ratio": round(ratio, 3), "lower_bound": bounded, "target": f"{op} {bound}", "verdict": verdict}
        log(f"{name:26} {shown}  target {op} {bound:<6} {verdict}")
    log("")
    sgc = results["specguard-cold"]
    log(f"specguard cold findings: {sgc.findings} ({sgc.note or 'none'})")
    if "fixit" in results:
        f = results["fixit"]
        log(peer_summary("fixit", f, f"{f.files_seen} files checked"))
    if "semgrep" in results:
        s = results["semgrep"]
        log(peer_summary("semgrep", s, f"{s.files_seen} of {files} files scanned"))

    if not args.no_record:
        key = f"{'analyzer' if framework == 'vllm' else 'analyzer-sglang'}/{started:%Y-%m-%dT%H:%M}"
        results_file.record(
            key, summary(started, framework, version, files, size, cores, load, results, ratios), args.results
        )
        log(f"recorded {key} in {args.results}")
    if args.json:
        payload = {
            "date": started.isoformat(timespec="seconds"),
            f"{framework}_version": version,
            "files": files,
            "megabytes": round(size / 1e6, 1),
            "machine": {
                "cores": cores,
                "load_average_at_start": [round(x, 2) for x in load],
                "python": platform.python_version(),
                "platform": platform.platform(),
            },
            "tools": versions,
            "repeat": args.repeat,
            "slow_repeat": args.slow_repeat,
            "results": {k: asdict(v) for k, v in results.items()},
            "ratios": ratios,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        log(f"wrote {args.json}")
    return 0 if all(r.ok for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
