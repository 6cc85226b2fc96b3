"""The one file every benchmark figure in the README and docs comes from: benchmarks/results.json.

Each run a benchmark script records is kept under a key of its own (`analyzer/2026-12-03T05:46`), with what it
measured; the docs quote those numbers and tests/test_doc_figures.py holds every quoted figure to this file, so a
page cannot disagree with the run it cites, nor with another page. A script writes its run with `record()`; a run
recorded before the scripts wrote here (seeded from docs/benchmarks.md) says so in its `source`."""

from __future__ import annotations

import json
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
