"""The one file every benchmark figure in the README and docs comes from: benchmarks/results.json.

Each run a benchmark script records is kept under a key of its own (`analyzer/2026-12-03T05:46`), with what it
measured; the docs quote those numbers and tests/test_doc_figures.py holds every quoted figure to this file, so a
page cannot disagree with the run it cites, nor with another page. A script writes its run with `record()`; a run
recorded before the scripts wrote here (seeded from docs/benchmarks.md) says so in its `source`."""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results.json"


def load(path: Path = RESULTS) -> dict[str, dict[str, Any]]:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def record(key: str, run: dict[str, Any], path: Path = RESULTS) -> None:
    """Keep `run` under `key` (replacing a run of that key), the file sorted so a diff shows only the new run."""
    runs = load(path)
    runs[key] = run
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(dict(sorted(runs.items())), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)  # whole or not at all: a run killed mid-write leaves the old file


def key(kind: str, started: datetime) -> str:
    """A run's key: the script's kind and the UTC minute it started (`guard_build/2026-12-03T05:46`)."""
    return f"{kind}/{started:%Y-%m-%dT%H:%M}"


def machine() -> dict[str, Any]:
    """What a run says about the machine it ran on: its cores and the load average when it started."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"cores": cores, "load_average_at_start": None if load is None else round(load, 1)}


def add_record_options(parser: argparse.ArgumentParser) -> None:
    """`--results FILE` and `--no-record`, as every benchmark script takes them."""
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help="record the run here, where the docs' figures come from (benchmarks/results.json)",
    )
    parser.add_argument("--no-record", action="store_true", help="record nothing (a trial run)")


def numbers_in(value: object) -> list[float]:
    """Every number a recorded run holds, however deep (what a page may quote of it)."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in numbers_in(v)]
    if isinstance(value, list):
        return [n for v in value for n in numbers_in(v)]
    return []


def shown_as(value: float, figure: str) -> bool:
    """Whether a page's `figure` (`2.57`, `31,722`) is `value` at the precision the page gives."""
    decimals = len(figure.partition(".")[2])
    return f"{value:.{decimals}f}" == figure.replace(",", "")
