"""One source for every benchmark figure beside the analyzer's (tests/test_doc_figures.py holds those): the runtime
guard's (docs/benchmarks.md from "## The runtime guard" on, docs/runtime-guard.md's Overhead), the `--fix` write
window's (docs/security.md), the startup's (docs/benchmarks.md) and CI's (the README's Quickstart, CONTRIBUTING.md).
Every figure those passages quote is a figure of a run benchmarks/results.json records for the script the passage
quotes, at the precision the page shows, or a target or setting the script judges with; runtime-guard.md quotes the
latest run of each script. Each script's writer is exercised on a tiny fake run, its module imported without
running its main (nor torch, vLLM or a server).

A figure is a number with a decimal point, one with thousands separators or of four digits and more, or a whole
number with a unit (µs, us, ms, s, min, minutes, %, x, times, MB, GB); versions, dates and times, "95 %" of a
confidence interval and the numbers in a name (b=8, x4, sm90, G0) are not figures. Counts without a unit
("4 requests", "k = 3") are the scripts' settings and are not checked."""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))  # the scripts import their writer as a sibling module

import ci_cost  # noqa: E402
import config_speed  # noqa: E402
import fix_write_window  # noqa: E402
import guard_build  # noqa: E402
import guard_e2e  # noqa: E402
import guard_overhead  # noqa: E402
import guard_overhead_gpu  # noqa: E402
import guard_toggle  # noqa: E402
import results  # noqa: E402
import startup  # noqa: E402

RUNS = results.load()
KINDS = ("guard_build", "guard_overhead", "guard_overhead_gpu", "guard_e2e", "guard_toggle", "fix_write_window")

# What a script judges with or is run with, beside what it measured: targets, the step the share is given against,
# the quiet before a round.
CONSTANTS: dict[str, list[float]] = {
    "guard_build": [guard_build.TARGET_US, guard_build.GPU_STEP_MS, *guard_build.BUILDS_PER_STEP],
    "guard_overhead": [guard_overhead.TARGET_US, guard_overhead.TARGET_PCT],
    "guard_overhead_gpu": [guard_overhead.TARGET_US, guard_overhead.TARGET_PCT],
    "guard_e2e": [guard_e2e.TARGET_RATIO, 100 * (1 - guard_e2e.TARGET_RATIO), guard_e2e.SETTLE_S],
    "guard_toggle": [100 * guard_toggle.TARGET, guard_toggle.GPU_STEP_MS, guard_toggle.SETTLE_S],
    "fix_write_window": [],
    "startup": [startup.TARGET_MS],
    "config_speed": [config_speed.TARGET_S],
    "ci_cost": [],
}

NOT_FIGURES = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?:-\d{2}:\d{2})?)?"  # dates, with a time or a span of times
    r"|T\d{2}:\d{2}|\b\d{2}:\d{2}\b"  # a key's time, a time alone
    r"|\d+\.\d+\.\d+\w*"  # versions (0.33.0, 0.7.2.post1)
    r"|95 % (?:CI|confidence|interval)"  # the confidence level, not a measurement
)
NUMBER = re.compile(
    r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?![\d.,]\d)"
    r"(?=(\s?(?:µs|us|ms|s|min|minutes|x|times|MB|GB)\b|\s?%)?)"
)


def figures(text: str) -> list[str]:
    out = []
    for m in NUMBER.finditer(NOT_FIGURES.sub(" ", text)):
        number, unit = m.group(1), m.group(2)
        if "." in number or "," in number or len(number) >= 4 or unit:
            out.append(number)
    return out


def runs_of(kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in RUNS.items() if k.partition("/")[0] == kind}


def latest(kind: str) -> dict[str, Any] | None:
    runs = runs_of(kind)
    return runs[max(runs)] if runs else None


def _region(page: str, start: str, end: str | None) -> str:
    text = (REPO / page).read_text(encoding="utf-8")
    begin = text.index(start)
    return text[begin : text.index(end, begin + len(start)) if end else None]


BENCH = "docs/benchmarks.md"
# passage: (page, where it starts, where it ends, the scripts whose runs it quotes)
PASSAGES = {
    "benchmarks.md, per build": (BENCH, "## The runtime guard", "### Per MLA launch", ["guard_build"]),
    "benchmarks.md, per launch": (BENCH, "### Per MLA launch", "### On a GPU", ["guard_overhead"]),
    "benchmarks.md, on a GPU": (BENCH, "### On a GPU", "### In a real server", ["guard_overhead_gpu"]),
    "benchmarks.md, in a real server": (BENCH, "### In a real server", "### One server toggling", ["guard_e2e"]),
    "benchmarks.md, one server toggling": (BENCH, "### One server toggling", "\n## ", ["guard_toggle"]),
    "benchmarks.md, config": (BENCH, "## `specguard config` per serving config", "## Startup", ["config_speed"]),
    "benchmarks.md, startup": (BENCH, "## Startup: `specguard --version`", None, ["startup"]),
    "README.md, the Quickstart's second command": ("README.md", "It needs:", "For the analyzer", ["ci_cost"]),
    "CONTRIBUTING.md, CI time": ("CONTRIBUTING.md", "CI time", "## Where torch comes from", ["ci_cost"]),
    "security.md, the write window": (
        "docs/security.md",
        "measured by `benchmarks/fix_write_window.py`",
        "where a lease",
        ["fix_write_window"],
    ),
}
# runtime-guard.md's Overhead quotes the latest run of each script, and nothing else.
LATEST_PASSAGE = ("docs/runtime-guard.md", "## Overhead", None, list(KINDS[:5]))


def _known(kinds: list[str], only_latest: bool) -> list[float]:
    known: list[float] = []
    for kind in kinds:
        runs = [latest(kind)] if only_latest else list(runs_of(kind).values())
        known += results.numbers_in([r for r in runs if r is not None]) + CONSTANTS[kind]
    return known


@pytest.mark.parametrize("passage", sorted(PASSAGES))
def test_every_figure_a_passage_quotes_is_a_recorded_run(passage: str) -> None:
    page, start, end, kinds = PASSAGES[passage]
    found = figures(_region(page, start, end))
    if kinds != ["guard_overhead_gpu"] or runs_of("guard_overhead_gpu"):
        assert found, f"{passage}: no figure found where the benchmark is quoted"
    known = _known(kinds, only_latest=False)
    strays = [f for f in found if not any(results.shown_as(v, f) for v in known)]
    assert strays == [], f"{passage} quotes figures no recorded run of {kinds} holds: {strays}"


def test_runtime_guard_md_quotes_the_latest_run_of_each_script() -> None:
    page, start, end, kinds = LATEST_PASSAGE
    found = figures(_region(page, start, end))
    assert len(found) >= 10, found
    known = _known(kinds, only_latest=True)
    strays = [f for f in found if not any(results.shown_as(v, f) for v in known)]
    assert strays == [], f"{page}'s Overhead quotes figures the latest runs of {kinds} do not hold: {strays}"


@pytest.mark.parametrize("page", [BENCH, "docs/runtime-guard.md"])
def test_the_gpu_variant_is_said_not_to_have_run_while_no_run_is_recorded(page: str) -> None:
    text = " ".join((REPO / page).read_text(encoding="utf-8").split())
    says_not_run = bool(re.search(r"GPU variant[^.]*has not run|It has not run yet", text))
    assert says_not_run == (not runs_of("guard_overhead_gpu")), page


def test_the_startup_passage_quotes_the_latest_run() -> None:
    run = latest("startup")
    assert run is not None
    text = " ".join(_region(*PASSAGES["benchmarks.md, startup"][:3]).split())
    when = datetime.fromisoformat(run["date"]).strftime("%Y-%m-%d %H:%M")
    assert when in text and f"`specguard --version` {run['ms']['specguard --version']:.1f} ms" in text


def test_the_config_passage_quotes_the_latest_run() -> None:
    run = latest("config_speed")
    assert run is not None
    text = " ".join(_region(*PASSAGES["benchmarks.md, config"][:3]).split())
    when = datetime.fromisoformat(run["date"]).strftime("%Y-%m-%d %H:%M")
    assert when in text and f"median {run['seen_s']['median']:.2f} s" in text and run["verdict"] in text


def test_every_seeded_run_says_where_it_came_from() -> None:
    for key, run in RUNS.items():
        kind = key.partition("/")[0]
        assert run["script"] == f"benchmarks/{'analyzer_vs_peers' if kind == 'analyzer' else kind}.py", key
        assert run.get("date") or "seeded from" in run.get("source", ""), key


def test_the_figure_finder_finds_figures_and_skips_names() -> None:
    text = "b=8 x4 sm90 G0 vLLM 0.33.0 2026-12-01 17:02-17:06 UTC (95 % CI) k = 3, 4 requests: 2.40 us, 3 µs, "
    text += "31,722 builds, 40656 checks, 5 %, 1.5 s, 12-32 µs, 9.8x"
    assert figures(text) == ["2.40", "3", "31,722", "40656", "5", "1.5", "32", "9.8"]


# ------------------------------------------------------------------------------------------- the writers


STARTED = datetime(2030, 1, 2, 3, 4, tzinfo=timezone.utc)
MACHINE = {"cores": 2, "load_average_at_start": 0.4}


def _kept(tmp_path: Path, kind: str, run: dict) -> dict:
    path = tmp_path / "results.json"
    results.record("analyzer/2000-01-01T00:00", {"script": "benchmarks/analyzer_vs_peers.py"}, path)
    key = results.key(kind, STARTED)
    assert key == f"{kind}/2030-01-02T03:04"
    results.record(key, run, path)
    kept = json.loads(path.read_text())
    assert list(kept) == ["analyzer/2000-01-01T00:00", key] and not list(tmp_path.glob("*.tmp"))
    new = kept[key]
    assert new["script"] == f"benchmarks/{kind}.py" and new["date"] == "2030-01-02T03:04+00:00"
    assert new["cores"] == 2 and new["load_average_at_start"] == 0.4
    return new


def test_guard_build_records_its_table_and_the_paper_estimate(tmp_path: Path) -> None:
    rows = [
        {"case": "decode b=8", "unguarded_us": 2.404, "added_us": 2.774, "added_pct": 115.46, "self_timed_us": 5.031},
        {"case": "mixed b=32", "unguarded_us": 2.4, "added_us": 4.136, "added_pct": 172.3, "self_timed_us": 6.42},
    ]
    opts = argparse.Namespace(pairs=10, builds=20)
    new = _kept(tmp_path, "guard_build", guard_build.summary(STARTED, "0.33.0", opts, MACHINE, rows))
    assert new["rows"]["decode b=8"] == {
        "unguarded_us": 2.4,
        "added_us": 2.77,
        "added_pct": 115.46,
        "self_timed_us": 5.03,
    }
    assert new["worst_added_us"] == 4.14 and new["verdict"] == "NOT met" and new["pairs"] == 10
    # four builds a step at the least a build added, eight at the most, against a 30 ms step
    assert new["paper_estimate"]["us_per_step"] == [11.1, 33.1]
    assert new["paper_estimate"]["share_of_step_pct"] == [0.04, 0.11]


def test_guard_overhead_records_its_table(tmp_path: Path) -> None:
    row = {"unguarded_us": 13.771, "added_us": 2.516, "added_pct": 18.62, "floor_us": 0.61, "floor_pct": 4.494}
    rows = [{"case": "decode b=32 causal", **row}, {"case": "dcp=2 b=32 causal", **row, "added_us": 4.9}]
    opts = argparse.Namespace(pairs=300, launches=20)
    new = _kept(tmp_path, "guard_overhead", guard_overhead.summary(STARTED, "0.33.0", opts, MACHINE, rows))
    assert (
        new["rows"]["decode b=32 causal"]["added_us"] == 2.52 and new["rows"]["decode b=32 causal"]["floor_pct"] == 4.49
    )
    assert new["worst_added_us"] == 4.9 and new["worst_added_pct"] == 18.62 and new["worst_floor_pct"] == 4.49
    assert new["verdict"] == "NOT met"  # 18.62 % is over the 5 % target


def test_guard_overhead_gpu_records_its_table_and_the_device_reads_it_added(tmp_path: Path) -> None:
    rows = [
        {
            "case": "BatchDecodeWithPagedKVCacheWrapper.run b=32",
            "unguarded_us": 40.004,
            "added_us": 1.234,
            "added_pct": 3.08,
            "scalar_reads_unguarded": 0,
            "scalar_reads_guarded": 1,
        }
    ]
    device = {"name": "NVIDIA H200", "sm": "90", "flashinfer": "0.7.2.post1"}
    opts = argparse.Namespace(pairs=5, launches=20)
    run = guard_overhead_gpu.summary(STARTED, "0.33.0", device, opts, MACHINE, rows)
    new = _kept(tmp_path, "guard_overhead_gpu", run)
    assert new["rows"]["BatchDecodeWithPagedKVCacheWrapper.run b=32"] == {
        "unguarded_us": 40.0,
        "added_us": 1.23,
        "added_pct": 3.08,
        "guard_added_device_reads": 1,
    }
    assert new["verdict"] == "NOT met" and new["device"]["sm"] == "90"  # a device read added misses it


def test_guard_e2e_records_its_medians_interval_and_builds(tmp_path: Path) -> None:
    ratios = [0.9, 1.0, 0.95, 1.1, 0.62]
    rows = [{"round": i, "first": "off", "off_tps": 200.0, "on_tps": 200.0 * r} for i, r in enumerate(ratios)]
    opts = argparse.Namespace(requests=4, max_tokens=128, concurrency=1, settle=1.5)
    checks = {"(target)": 31722, "(draft)": 95166}
    new = _kept(tmp_path, "guard_e2e", guard_e2e.summary(STARTED, opts, MACHINE, rows, checks, 0))
    assert new["median_tokens_per_s"] == {"off": 200.0, "on": 190.0} and new["median_ratio"] == 0.95
    assert new["cost_pct"] == 5.0 and new["ci95"] == [0.62, 1.1]  # five rounds: the interval is their range
    assert new["cost_pct_most"] == 38.0 and new["cost_pct_least"] == -10.0
    assert new["round_ratio_range"] == [0.62, 1.1] and new["g0_checks"] == {"target": 31722, "draft": 95166}
    assert new["rounds"] == 5 and new["settle_s"] == 1.5 and new["verdict"] == "NOT met"


def test_guard_toggle_records_its_ratios_and_the_guards_share_of_a_step(tmp_path: Path) -> None:
    def block(kind: str, worker: list[float]) -> dict:
        return {"kind": kind, "rounds": [{"worker": w, "all": 2 * w} for w in worker]}

    blocks = [block("ABBA", [0.6, 0.62, 0.6, 0.6]), block("AA", [0.5, 0.6, 0.7, 1.5])]
    result = {
        "exit_code": 0,
        "guard_ns": 252_600_000,
        "g0_checks": 40_656,
        "g0_target_builds": 1_016,  # 254 steps a guarded round: 2 warm-up rounds and the two of the ABBA block
        "worker": {"cost": (0.99571, 0.79166, 1.07789), "control": (1.00277, 0.82931, 1.11482)},
        "all": {"cost": (0.9613, 0.8856, 1.1074), "control": (0.9724, 0.8505, 1.1889)},
    }
    opts = argparse.Namespace(blocks=1, requests=4, max_tokens=96, settle=1.5, warmup=2)
    new = _kept(tmp_path, "guard_toggle", guard_toggle.record_of(STARTED, opts, MACHINE, result, blocks, False))
    assert new["worker"] == {
        "cost_median": 0.9957,
        "cost_ci95": [0.7917, 1.0779],
        "control_median": 1.0028,
        "control_ci95": [0.8293, 1.1148],
    }
    assert new["guard_ms"] == 252.6 and new["guard_us_per_build"] == 6.21 and new["guard_us_per_step"] == 248.62
    assert new["steps_per_guarded_round"] == 254 and new["worker_cpu_s_per_guarded_round"] == 0.61
    assert new["worker_step_cpu_ms"] == 2.4 and new["guard_share_of_step_pct"] == 10.35
    assert new["guard_share_of_gpu_step_pct"] == 0.829 and new["worker_round_cpu_s_range"] == [0.5, 1.5]
    assert new["verdict"] == "NOT met"


def test_fix_write_window_records_each_measure(tmp_path: Path) -> None:
    gaps = [1_700] * 98 + [4_000, 9_000]
    measured = {"fstat_to_ftruncate": gaps, "compare_to_first_write": [7_000, 7_004, 55_000]}
    new = _kept(tmp_path, "fix_write_window", fix_write_window.summary(STARTED, 100, MACHINE, measured))
    assert new["fstat_to_ftruncate"] == {"median_us": 1.7, "p99_us": 9.0, "max_us": 9.0}
    assert new["compare_to_first_write"] == {"median_us": 7.0, "p99_us": 55.0, "max_us": 55.0}
    assert new["runs"] == 100
    assert fix_write_window._summary(gaps) == "median 1.70 us, p99 9.00 us, max 9.00 us"  # what it prints


def test_startup_records_its_times_and_ratios(tmp_path: Path) -> None:
    new = _kept(tmp_path, "startup", startup.summary(STARTED, 20, MACHINE, 23.64, 22.41, 2.29))
    assert new["ms"] == {"python -c pass": 23.6, "ruff --version": 2.3, "specguard --version": 22.4}
    assert new["ratios"] == {"specguard / ruff": 9.8, "specguard / interpreter": 0.95}
    assert new["verdict"] == "PASS" and new["repeat"] == 20


def test_config_speed_records_the_spread_and_the_cold_runs(tmp_path: Path) -> None:
    warm = [0.9, 1.2, 0.8, 1.0, 2.5, 0.95, 1.1, 0.85, 0.9, 1.0]
    new = _kept(tmp_path, "config_speed", config_speed.summary(STARTED, MACHINE, ["0.31.0"], warm, {"0.31.0": 41.26}))
    assert new["seen_s"] == {"median": 0.97, "p90": 2.5, "max": 2.5}
    assert new["not_seen_s"] == {"0.31.0": 41.3} and new["configs"] == 10 and new["verdict"] == "PASS"


def test_ci_cost_records_minutes_tests_and_disk(tmp_path: Path) -> None:
    output = "....\n2000 passed in 1180.00s (0:19:40)\n"
    run = ci_cost.summary(STARTED, MACHINE, "abc123", False, 19.66, 0, output, {"venv-e2e": 3.54, "vllm-src": 0.44})
    new = _kept(tmp_path, "ci_cost", run)
    assert (new["minutes"], new["tests_passed"], new["cold"], new["exit_code"]) == (19.7, 2000, False, 0)
    assert new["cache_gb"] == {"venv-e2e": 3.5, "vllm-src": 0.4, "total": 4.0}
    assert ci_cost.passed_tests("1 failed, 3 passed in 2s") == 3 and ci_cost.passed_tests("error") is None
