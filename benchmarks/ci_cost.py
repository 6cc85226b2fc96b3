#!/usr/bin/env python3
"""What the README's second Quickstart command costs: `bash .ci/run` on a clean clone, timed, and what it keeps on
disk, in one run.

    python benchmarks/ci_cost.py [--results FILE] [--no-record]

It clones the repository's HEAD into a temporary folder (as CI does: a clean clone of main), runs `bash .ci/run`
there and records the wall-clock minutes, whether the test environments had to be built first (a cold run: none
under `SPECGUARD_CACHE`, default `~/.cache/specguard`, when it started; point `SPECGUARD_CACHE` and
`SPECGUARD_TEST_CACHE` at an empty folder for one), the tests pytest passed, the exit code, and the size of each
folder under the cache afterwards. The README and CONTRIBUTING.md quote these runs, and tests/test_bench_figures.py
holds their figures to benchmarks/results.json. Run it on an idle machine: the run takes 20 minutes and more.

`.ci/run` installs the clone's specguard into both venvs in editable mode, and the e2e tier's fault plugin into the
e2e venv: after this script, reinstall your checkout's (`"$PY" -m pip install -e .`, and in the e2e venv also
`-e tests/e2e/fault_plugin`) if you use them: the clone is gone, and the e2e fault tests fail with no fault injected.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results as results_file  # noqa: E402 - benchmarks/results.py, beside this script

REPO = Path(__file__).resolve().parent.parent
VENVS = ("venv-runtime", "venv-e2e")  # what .ci/runtime-env.sh and .ci/e2e-env.sh build, and reuse when there


def cache_root() -> Path:
    return Path(os.environ.get("SPECGUARD_CACHE") or Path.home() / ".cache" / "specguard")


def folder_gb(path: Path) -> float:
    """The bytes a folder's files take on disk (not following links), in GB."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:
                continue
    return total / 1e9


def passed_tests(output: str) -> int | None:
    """The count on pytest's closing line (`2000 passed in ...`), None when it has none."""
    found = re.findall(r"(\d+) passed", output)
    return int(found[-1]) if found else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    results_file.add_record_options(parser)
    args = parser.parse_args()
    started = datetime.now(timezone.utc)
    machine = results_file.machine()
    cold = not all((cache_root() / venv).is_dir() for venv in VENVS)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
    with tempfile.TemporaryDirectory(prefix="specguard-ci-") as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        begin = time.perf_counter()
        run = subprocess.run(["bash", ".ci/run"], cwd=clone, capture_output=True, text=True)
        minutes = (time.perf_counter() - begin) / 60
    log = Path(tempfile.gettempdir()) / f"specguard-ci-{started:%Y%m%dT%H%M}.log"
    log.write_text(run.stdout + "\n" + run.stderr, encoding="utf-8")  # the whole run, for a failure's detail
    sys.stdout.write(run.stdout[-3000:])
    sys.stderr.write(run.stderr[-3000:])
    print(f"the whole output: {log}")
    sizes = {p.name: folder_gb(p) for p in sorted(cache_root().iterdir()) if p.is_dir()}
    run_figures = summary(started, machine, commit.stdout.strip(), cold, minutes, run.returncode, run.stdout, sizes)
    print(
        f"\n.ci/run ({'cold' if cold else 'warm'}): {run_figures['minutes']} min, exit code {run.returncode}, "
        f"{run_figures['tests_passed']} tests passed; {run_figures['cache_gb']['total']} GB under {cache_root()}"
    )
    if not args.no_record:
        key = results_file.key("ci_cost", started)
        results_file.record(key, run_figures, args.results)
        print(f"recorded {key} in {args.results}")
    return run.returncode


def summary(
    started: datetime,
    machine: dict,
    commit: str,
    cold: bool,
    minutes: float,
    exit_code: int,
    output: str,
    sizes: dict[str, float],
) -> dict:
    """A run as benchmarks/results.json keeps it: minutes and GB to one decimal, as the docs quote them."""
    return {
        "script": "benchmarks/ci_cost.py",
        "date": started.isoformat(timespec="minutes"),
        **machine,
        "commit": commit,
        "cold": cold,
        "minutes": round(minutes, 1),
        "exit_code": exit_code,
        "tests_passed": passed_tests(output),
        "cache_gb": {**{name: round(gb, 1) for name, gb in sizes.items()}, "total": round(sum(sizes.values()), 1)},
    }


if __name__ == "__main__":
    raise SystemExit(main())
