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
("4 requests", "k = 3") are the scripts' settings and are not checked. A minus sign before a figure is part of it
("-3.18 to +2.15": -3.18 and 2.15); a hyphen between two figures is a range ("2.9-9.03": 2.9 and 9.03)."""

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
    r"(?<![\w.])([-+]?)(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?![\d.,]\d)"
    r"(?=(\s?(?:µs|us|ms|s|min|minutes|x|times|MB|GB)\b|\s?%)?)"
)


def figures(text: str) -> list[str]:
    out = []
    for m in NUMBER.finditer(NOT_FIGURES.sub(" ", text)):
        sign, number, unit = m.groups()
        if "." in number or "," in number or len(number) >= 4 or unit:
            out.append(number if sign != "-" else sign + number)  # a change's sign is part of its figure
    return out


def test_a_figure_keeps_its_minus_sign_and_a_range_its_two_ends() -> None:
    assert figures("(-3.18 to +2.15 %), 2.9-9.03 %, b=8") == ["-3.18", "2.15", "2.9", "9.03"]


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
    # the toggling passage sets the server's clock beside guard_build's figures for the same builds
    "benchmarks.md, one server toggling": (BENCH, "### One server toggling", "\n## ", ["guard_toggle", "guard_build"]),
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
        script = "analyzer_vs_peers" if kind in ("analyzer", "analyzer-sglang") else kind
        assert run["script"] == f"benchmarks/{script}.py", key
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


def test_guard_build_records_its_distributions_hot_and_cold_and_the_share_of_a_gpu_step(tmp_path: Path) -> None:
    def dist(median: float) -> dict:
        return {"median": median, "ci95": [median - 0.011, median + 0.014], "p10_p90": [median - 0.2, median + 0.5]}

    def row(case: str, cache: str, self_timed: float, unseen: float) -> dict:
        return {
            "case": case,
            "cache": cache,
            "unguarded": dist(2.404),
            "self_timed": dist(self_timed),
            "added": dist(self_timed + unseen),
            "passthrough": dist(0.2),
            "unseen": dist(unseen),
        }

    rows = [
        row("decode b=8", "hot", 2.286, 0.614),
        row("draft steps b=1 k=3", "hot", 8.25, 0.85),
        row("decode b=8", "cold", 22.4, 3.0),
        row("draft steps b=1 k=3", "cold", 29.41, 2.9),
        row("decode b=8", "llc", 70.8, 40.0),
        row("draft steps b=1 k=3", "llc", 74.93, -9.0),
    ]
    opts = argparse.Namespace(
        rounds=10, builds=24, warmup=2, cold_rounds=5, cold_builds=6, llc_rounds=4, llc_builds=3, seed=7
    )
    new = _kept(tmp_path, "guard_build", guard_build.summary(STARTED, "0.33.0", opts, MACHINE, rows))
    hot = new["rows"]["decode b=8"]["hot"]
    assert hot["self_timed"] == {"median": 2.29, "ci95": [2.27, 2.3], "p10_p90": [2.09, 2.79]}
    assert list(hot) == list(guard_build.MEASURES) and list(new["rows"]["decode b=8"]) == ["hot", "cold", "llc"]
    # the verdict on the worst hot median; the cold range beside it
    assert new["worst_self_timed_us"] == 8.25 and new["verdict"] == "NOT met" and new["seed"] == 7
    # the LLC-cold range beside it; what the clock cannot see from the hot and cold rows (LLC-cold: per row only)
    assert new["cold_self_timed_us"] == [22.4, 29.41] and new["unseen_us"] == [0.61, 3.0]
    assert new["llc_self_timed_us"] == [70.8, 74.93] and new["rows"]["decode b=8"]["llc"]["unseen"]["median"] == 40
    assert new["rounds"] == 10 and new["warmup"] == 2 and new["cold_rounds"] == 5 and new["llc_rounds"] == 4
    # four builds a step at the least hot median, eight at the most cold one, against a 30 ms step
    assert new["gpu_step_share"]["us_per_step"] == [9.1, 235.3]
    assert new["gpu_step_share"]["pct"] == [0.03, 0.78]


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


def test_guard_toggle_takes_the_guards_clock_per_block_and_records_it(tmp_path: Path) -> None:
    def counters(ns: dict[str, int], runs: dict[str, int]) -> dict:
        return {"guard_ns": ns, "checks_run": runs}

    # one worker: two switches of an ABBA block; G0 and G5 sites of target and draft builds, and a G4 site
    on = counters({"G0:B.build(target)": 1_000, "G0:B.build_for_drafting(draft)": 500}, {"G0:B.build(target)": 10})
    off = counters(
        {
            "G0:B.build(target)": 1_000 + 250 * 2_400,
            "G0:B.build_for_drafting(draft)": 500 + 750 * 2_100,
            "G5:B.build_for_drafting(draft)": 750 * 5_000,
            "G4:Speculator._build_attn_metadata": 1_000_000,
        },
        {"G0:B.build(target)": 10 + 250, "G0:B.build_for_drafting(draft)": 750, "G5:B.build_for_drafting(draft)": 750},
    )
    delta = guard_toggle.guard_delta({7: on}, {7: off})
    assert delta == {
        "ns_target": 600_000,
        "ns_draft": 750 * 7_100,
        "builds_target": 250,
        "builds_draft": 750,
        "ns_all": 600_000 + 750 * 7_100 + 1_000_000,
    }
    figures = guard_toggle.per_build(delta)
    assert figures["target"] == 2.4 and round(figures["draft"], 3) == 7.1
    assert round(figures["step"], 2) == round((600_000 + 750 * 7_100 + 1_000_000) / 250 / 1e3, 2)

    def block(kind: str, worker: list[float], guard: dict | None = None) -> dict:
        out = {"kind": kind, "rounds": [{"worker": w, "all": 2 * w} for w in worker]}
        return out | ({"guard": guard} if guard else {})

    # the guard's clock over two guarded rounds: 6.925 ms, 0.577 % of the 1.2 s its two unguarded rounds took
    blocks = [
        block("ABBA", [0.6, 0.612, 0.6, 0.6], delta),
        block("PASS", [0.6, 0.603, 0.603, 0.6]),
        block("CHECKS", [0.6, 0.605, 0.6, 0.6], delta),
        block("AA", [0.5, 0.6, 0.7, 1.5]),
    ]
    result = guard_toggle.analyse(blocks, 0)
    assert result["worker"]["cost"][0] == pytest.approx((0.612 + 0.6) / (0.6 + 0.6))
    assert result["worker"]["interception"][0] == pytest.approx(1.005)
    assert result["clock"]["cost"][0] == pytest.approx(1 + 0.006925 / 1.2)
    assert set(result["clock"]) == {"cost", "checks"}  # only blocks whose guard checked have a clock
    assert result["guard_us"]["target"][0] == 2.4 and result["guard_totals"]["builds_draft"] == 1500
    # one block a kind: each interval is its one value. The clock's 0.577 % is not the checks' 0.417 %, the clock
    # and the interception's 0.5 % make 1.077 %, not the cost's 1.0 %, and 0.5 % + 0.417 % is not 1.0 % either
    assert result["agreement"] == {
        "clock = checks": False,
        "clock + interception = cost": False,
        "interception + checks = cost": False,
    }
    # two blocks a kind, whose checked rounds cost 0.575 % and 0.583 %: the clock's 0.577 % is all of the cost
    around = [
        block(kind, [0.6, 0.6 + extra, 0.6, 0.6], delta) for kind in ("ABBA", "CHECKS") for extra in (6.9e-3, 7e-3)
    ]
    around += [block("PASS", [0.6, 0.6, 0.6, 0.6])] * 2
    assert guard_toggle.analyse(around, 0)["agreement"] == dict.fromkeys(result["agreement"], True)
    opts = argparse.Namespace(blocks=1, requests=4, max_tokens=96, settle=1.5, warmup=2)
    new = _kept(tmp_path, "guard_toggle", guard_toggle.record_of(STARTED, opts, MACHINE, result, blocks, False))
    assert new["guard_us"]["target"] == {"median": 2.4, "ci95": [2.4, 2.4]}
    assert new["guard_us"]["draft"]["median"] == 7.1 and new["builds"] == {"target": 500, "draft": 1500}
    # 250 target builds over two guarded rounds: 125 steps a round; the median guarded round (the mean of 0.6 s
    # and 0.605 s, the middle two of four) over 125 steps
    assert new["worker_step_cpu_ms"] == 4.82 and new["guard_share_of_gpu_step_pct"] == 0.092
    assert new["verdict"] == "NOT met" and new["server_exit_code"] == 0
    assert new["worker"]["cost"] == {"median": 1.0, "ci95": [1.0, 1.0]}  # one block: the interval is it
    assert new["worker"]["interception"]["median"] == 0.5 and new["clock_pct"]["cost"]["median"] == 0.58
    assert new["agreement"] == result["agreement"] and new["cost_interval_width_pct"] == 0.0
    assert new["sums_pct"]["clock + interception"]["median"] == 1.08  # 0.577 % + 0.5 %
    assert new["sums_pct"]["interception + checks"] == {"median": 0.92, "ci95": [0.92, 0.92]}  # 0.5 % + 0.417 %
    assert new["worker_round_cpu_s_range"] == [0.5, 1.5] and new["guard_ms"] == 13.8


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


def test_the_toggle_plugins_pass_through_only_forwards_what_the_guard_patched(monkeypatch: pytest.MonkeyPatch) -> None:
    """guard_toggle.py's `pass` rounds: each function the guard patched becomes a wrapper that calls what was
    there before (classmethods and staticmethods stay descriptors); what the guard added where a class only
    inherited the name stays as installed."""
    monkeypatch.syspath_prepend(str(REPO / "tests" / "e2e" / "fault_plugin"))
    import specguard_e2e_fault as plugin

    from specguard.runtime.patching import ABSENT, Patch

    def build(self: Any, n: int) -> str:
        return f"build {n}"

    def merge(cls: type, n: int) -> str:
        return f"merge {cls.__name__} {n}"

    def scale(n: int) -> int:
        return 2 * n

    def guarded(*args: Any) -> str:
        return "checked"

    class Builder:
        pass

    for name in ("build", "merge", "scale", "hook"):
        setattr(Builder, name, guarded)
    patches = [
        Patch(Builder, "build", build),
        Patch(Builder, "merge", classmethod(merge)),
        Patch(Builder, "scale", staticmethod(scale)),
        Patch(Builder, "hook", ABSENT),
    ]
    plugin._pass_through(patches)
    assert Builder().build(3) == "build 3" and Builder.merge(4) == "merge Builder 4" and Builder.scale(5) == 10
    assert Builder.__dict__["build"] is not build and isinstance(Builder.__dict__["merge"], classmethod)
    assert Builder.__dict__["hook"] is guarded
