#!/usr/bin/env python3
"""How long `specguard --version` takes against `ruff --version` and a bare interpreter, in one run.

    python benchmarks/startup.py [--repeat N] [--no-record]

Editors and pre-commit hooks start the tool for every file or commit, and ask its version first. The target
(issue 32): `specguard --version` under 30 ms on the project's 2-core machine. Both commands are run from the
interpreter's own bin/ folder (no shims), each as its own process, best of N wall-clock times; the interpreter
alone (`python -c pass`, with the same site-packages) is printed as the floor. Run it on an idle machine: nothing
here belongs in a unit test. Each run is recorded in benchmarks/results.json (`startup/DATE`), where the docs'
figures come from.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results as results_file  # noqa: E402 - benchmarks/results.py, beside this script

TARGET_MS = 30.0


def best_ms(command: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append((time.perf_counter() - start) * 1000)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    results_file.add_record_options(parser)
    args = parser.parse_args()
    started = datetime.now(timezone.utc)
    machine = results_file.machine()
    bin_dir = Path(sys.executable).parent
    specguard = shutil.which("specguard", path=str(bin_dir))
    ruff = shutil.which("ruff", path=str(bin_dir))
    if specguard is None or ruff is None:
        print(f"needs specguard and ruff installed beside {sys.executable}", file=sys.stderr)
        return 2
    floor = best_ms([sys.executable, "-c", "pass"], args.repeat)
    ours = best_ms([specguard, "--version"], args.repeat)
    theirs = best_ms([ruff, "--version"], args.repeat)
    verdict = "PASS" if ours <= TARGET_MS else "MISS"
    print(f"python -c pass        {floor:6.1f} ms")
    print(f"ruff --version        {theirs:6.1f} ms")
    print(f"specguard --version   {ours:6.1f} ms   {ours / theirs:.1f}x ruff, {ours / floor:.2f}x the interpreter")
    print(f"target: specguard --version <= {TARGET_MS:.0f} ms: {verdict}")
    if not args.no_record:
        key = results_file.key("startup", started)
        results_file.record(key, summary(started, args.repeat, machine, floor, ours, theirs), args.results)
        print(f"recorded {key} in {args.results}")
    return 0 if verdict == "PASS" else 1


def summary(started: datetime, repeat: int, machine: dict, floor: float, ours: float, theirs: float) -> dict:
    """A run as benchmarks/results.json keeps it: the figures the script prints, rounded as it prints them."""
    return {
        "script": "benchmarks/startup.py",
        "date": started.isoformat(timespec="minutes"),
        **machine,
        "repeat": repeat,
        "ms": {
            "python -c pass": round(floor, 1),
            "ruff --version": round(theirs, 1),
            "specguard --version": round(ours, 1),
        },
        "ratios": {"specguard / ruff": round(ours / theirs, 1), "specguard / interpreter": round(ours / floor, 2)},
        "target_ms": TARGET_MS,
        "verdict": "PASS" if ours <= TARGET_MS else "MISS",
    }


if __name__ == "__main__":
    raise SystemExit(main())
