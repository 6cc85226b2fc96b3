"""benchmarks/guard_e2e.py runs end to end: two real servers, a couple of tiny rounds (no timing asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_e2e_overhead_benchmark_runs(e2e_python: str, tmp_path: Path) -> None:
    out = tmp_path / "guard_e2e.json"
    proc = subprocess.run(
        [sys.executable, "benchmarks/guard_e2e.py", "--python", e2e_python, "--rounds", "2", "--warmup", "0"]
        + ["--requests", "1", "--max-tokens", "8", "--json", str(out), "--results", str(tmp_path / "results.json")],
        cwd=REPO,
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    # 0 or 1 is the verdict on the target; anything else (an assertion, a traceback) is a broken benchmark
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert [r["first"] for r in result["rows"]] == ["off", "on"]
    assert all(r["off_tps"] > 0 and r["on_tps"] > 0 for r in result["rows"])
    assert result["g0_checks"]["(target)"] > 0 and result["g0_checks"]["(draft)"] > 0
    assert "specguard lines in the unguarded server's log: 0;" in proc.stdout
    assert "exit codes {'off': 0, 'on': 0}" in proc.stdout
    # recorded where --results says (never in benchmarks/results.json, which holds the runs the docs quote)
    (run,) = json.loads((tmp_path / "results.json").read_text()).values()
    assert run["script"] == "benchmarks/guard_e2e.py" and run["rounds"] == 2


def test_the_toggling_benchmark_runs(e2e_python: str, tmp_path: Path) -> None:
    """benchmarks/guard_toggle.py: one server, the guard turned on and off in all its processes between
    rounds; one block of each kind (cost, interception, checks, A/A) of tiny rounds (no timing asserted)."""
    out = tmp_path / "guard_toggle.json"
    proc = subprocess.run(
        [sys.executable, "benchmarks/guard_toggle.py", "--python", e2e_python, "--blocks", "1", "--warmup", "0"]
        + ["--requests", "1", "--max-tokens", "8", "--settle", "0.2", "--json", str(out)]
        + ["--results", str(tmp_path / "results.json")],
        cwd=REPO,
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert [b["kind"] for b in result["blocks"]] == ["ABBA", "PASS", "CHECKS", "AA"]
    assert all(r["worker"] > 0 and r["all"] >= r["worker"] for b in result["blocks"] for r in b["rounds"])
    # the guarded rounds ran the guard, and it timed itself: each ABBA block's counters at its switches
    totals = result["guard_totals"]
    assert totals["builds_target"] > 0 and totals["builds_draft"] > 0 and totals["ns_all"] > 0
    assert result["exit_code"] == 0 and ["guard" in b for b in result["blocks"]] == [True, False, True, False]
    # pass-through rounds intercept and check nothing: the counters did not move
    assert not any(result["blocks"][1]["unchecked"].values())
    assert "control -" in proc.stdout or "control +" in proc.stdout
    assert "per target build:" in proc.stdout and "figures clock = checks: " in proc.stdout
    last = proc.stdout.strip().splitlines()[-2]  # the verdict's line, before the line naming the record
    assert last.endswith(f"this script exits {proc.returncode}") and "the server exited with code 0" in last
    (run,) = json.loads((tmp_path / "results.json").read_text()).values()
    assert run["script"] == "benchmarks/guard_toggle.py"
    assert run["builds"] == {"target": totals["builds_target"], "draft": totals["builds_draft"]}
    assert run["guard_us"]["target"]["median"] > 0 and run["clock_pct"]["cost"]["median"] > 0
