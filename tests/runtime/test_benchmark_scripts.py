"""The guard-overhead benchmarks run end to end (a few tiny blocks; no timing is asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from sg_runtime_helpers import REPO, venv_python

sys.path.insert(0, str(REPO / "benchmarks"))  # the scripts import their siblings as modules
import guard_build  # noqa: E402


def _run(args: list[str]) -> subprocess.CompletedProcess:
    # the checkout first, then whatever the run had first on the path (test_flashinfer_next.py: another FlashInfer)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [venv_python(), "-W", "ignore", *args], env=env, capture_output=True, text=True, timeout=600, cwd=REPO
    )


def test_cpu_benchmark_measures_every_case(tmp_path) -> None:
    out = tmp_path / "overhead.json"
    recorded = tmp_path / "results.json"  # never benchmarks/results.json, which holds the runs the docs quote
    args = ["--pairs", "3", "--launches", "2", "--json", str(out), "--results", str(recorded)]
    proc = _run(["benchmarks/guard_overhead.py", *args])
    # 0 or 1 is the verdict on the targets; anything else (an assertion, a traceback) is a broken benchmark
    assert proc.returncode in (0, 1), proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert [r["case"] for r in result["rows"]] == [
        "decode b=32 causal",
        "spec-decode b=32 ragged causal",
        "dspark b=16x4 non-causal",
        "dcp=2 b=32 causal",
        "dcp=2 dspark b=16x4 non-causal",
    ]
    assert all(r["unguarded_us"] > 0 for r in result["rows"])
    assert result["met"] is (proc.returncode == 0)
    assert "worst added:" in proc.stdout
    (run,) = json.loads(recorded.read_text()).values()
    assert list(run["rows"]) == [r["case"] for r in result["rows"]] and run["pairs"] == 3


def test_gpu_variant_says_plainly_when_there_is_no_gpu() -> None:
    proc = _run(["benchmarks/guard_overhead_gpu.py", "--pairs", "1", "--no-record"])
    assert proc.returncode == 2, proc.stderr[-4000:]
    assert "no CUDA device" in proc.stdout


def test_build_benchmark_measures_every_case(tmp_path) -> None:
    out = tmp_path / "build.json"
    recorded = tmp_path / "results.json"
    proc = _run(
        ["benchmarks/guard_build.py", "--rounds", "5", "--warmup", "1", "--builds", "3", "--seed", "7"]
        + ["--cold-rounds", "2", "--cold-builds", "3", "--llc-rounds", "2", "--llc-builds", "1"]
        + ["--json", str(out), "--results", str(recorded)]
    )
    assert proc.returncode in (0, 1), proc.stderr[-4000:]
    result = json.loads(out.read_text())
    # every case in each cache state, measured in the order the seed drew, and reported in the table's order
    cases = list(guard_build.CASES)
    caches = ("hot", "cold", "llc")
    assert [(r["cache"], r["case"]) for r in result["rows"]] == [(c, n) for c in caches for n in cases]
    assert result["seed"] == 7
    assert sorted(result["order"]) == sorted(guard_build.CASES)
    assert f"(seed 7): {', '.join(result['order'])}" in proc.stdout
    assert all(r[what]["median"] > 0 for r in result["rows"] for what in ("unguarded", "self_timed"))
    assert result["met"] is (proc.returncode == 0) and "worst hot case by the guard's clock:" in proc.stdout
    (run,) = json.loads(recorded.read_text()).values()
    assert run["verdict"] == ("met" if result["met"] else "NOT met") and run["seed"] == 7
    assert len(run["gpu_step_share"]["us_per_step"]) == 2 and run["warmup"] == 1 and run["cold_rounds"] == 2
    assert list(run["rows"][cases[0]]) == list(caches) and len(run["llc_self_timed_us"]) == 2
