#!/usr/bin/env python3
"""How long `specguard config` takes per serving config, on releases it has seen and on one it has not, in one run.

    python benchmarks/config_speed.py [--versions 0.29.0 0.31.0 0.33.0] [--no-record]

The target (issue 30): on a release it has seen, a config's median time <= 1 s on the project's 2-core machine.
What it does:
  1. takes the configs of the blind config sets kept in tests/corpus/blind_config_r*/ (the cases that are not forks,
     on the releases asked for): command lines, YAML files and serving environments written by people who never
     read specguard, so neither the configs nor their mix were chosen to be fast;
  2. "seen" (a warm source cache): for each release, one run fills the user cache with `specguard check` over the
     served tree; then every config is run as its own process (`python -m specguard config --vllm-source ...`), and
     the wall-clock time of each is kept: median, 90th percentile and slowest are printed;
  3. "not seen" (a cold source cache): for each release, the first config again, in a fresh user cache
     (XDG_CACHE_HOME in a temp folder), so it checks the whole served tree first;
  4. records the run in benchmarks/results.json (`config_speed/DATE`), where docs/benchmarks.md's figures come from.
The release sources are the cached wheels the tests use (~/.cache/specguard/vllm-src/X, fetched by tests/conftest.py).
Wall-clock times on a machine that may be shared: run it on an idle one. Nothing here belongs in a unit test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results as results_file  # noqa: E402 - benchmarks/results.py, beside this script

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "corpus"
SOURCES = Path(os.environ.get("SPECGUARD_CACHE") or Path.home() / ".cache" / "specguard") / "vllm-src"
TARGET_S = 1.0


def cases(versions: list[str]) -> list[dict]:
    found = []
    for path in sorted(CORPUS.glob("blind_config_r*/cases.json")):
        found += [c for c in json.loads(path.read_text()) if not c["fork"] and c["version"] in versions]
    return found


def run_config(case: dict, source: Path, folder: Path, env: dict[str, str]) -> float:
    argv = [sys.executable, "-m", "specguard", "config", "--vllm-source", str(source)]
    argv += [f"--env={k}={v}" for k, v in case["env"].items()]
    if case["yaml"]:
        (folder / "config.yaml").write_text(case["yaml"])
        argv.append(str(folder / "config.yaml"))
    argv += ["--", *case["argv"]]
    start = time.perf_counter()
    subprocess.run(argv, capture_output=True, env=env, cwd=folder, timeout=900)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="+", default=["0.29.0", "0.31.0", "0.33.0"])
    results_file.add_record_options(parser)
    args = parser.parse_args()
    started = datetime.now(timezone.utc)
    machine = results_file.machine()
    missing = [v for v in args.versions if not (SOURCES / v / "vllm" / "__init__.py").is_file()]
    if missing:
        print(f"no cached source for {', '.join(missing)} under {SOURCES}: run the tests once", file=sys.stderr)
        return 2
    chosen = cases(args.versions)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    warm: list[float] = []
    cold: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        for version in args.versions:
            mine = [c for c in chosen if c["version"] == version]
            if not mine:
                continue
            source = SOURCES / version
            fresh = folder / f"xdg-{version}"
            cold[version] = run_config(mine[0], source, folder, {**env, "XDG_CACHE_HOME": str(fresh)})
            run_config(mine[0], source, folder, env)  # fills the user's own cache, as a first use would
            warm += [run_config(case, source, folder, env) for case in mine]
    if not warm:
        print("no config of the blind sets is on these releases", file=sys.stderr)
        return 2
    run = summary(started, machine, args.versions, warm, cold)
    print(f"{len(warm)} configs on {', '.join(args.versions)} (a release seen: its source cache warm)")
    print(
        f"  median {run['seen_s']['median']:.2f} s, 90th percentile {run['seen_s']['p90']:.2f} s, "
        f"slowest {run['seen_s']['max']:.2f} s"
    )
    for version, seconds in cold.items():
        print(f"  {version} not seen (a fresh user cache): {seconds:.1f} s for its first config")
    print(f"target: median <= {TARGET_S:.0f} s on a release seen: {run['verdict']}")
    if not args.no_record:
        key = results_file.key("config_speed", started)
        results_file.record(key, run, args.results)
        print(f"recorded {key} in {args.results}")
    return 0 if run["verdict"] == "PASS" else 1


def summary(started: datetime, machine: dict, versions: list[str], warm: list[float], cold: dict[str, float]) -> dict:
    """A run as benchmarks/results.json keeps it: the figures the script prints, rounded as it prints them."""
    ordered = sorted(warm)
    median = statistics.median(ordered)
    return {
        "script": "benchmarks/config_speed.py",
        "date": started.isoformat(timespec="minutes"),
        **machine,
        "versions": versions,
        "configs": len(warm),
        "seen_s": {
            "median": round(median, 2),
            "p90": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 2),
            "max": round(ordered[-1], 2),
        },
        "not_seen_s": {version: round(seconds, 1) for version, seconds in cold.items()},
        "target_s": TARGET_S,
        "verdict": "PASS" if median <= TARGET_S else "MISS",
    }


if __name__ == "__main__":
    raise SystemExit(main())
