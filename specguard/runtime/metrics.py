"""The guard's counters on vLLM's own Prometheus `/metrics`, added up over every process of one server.

vLLM serves `/metrics` from the API server process, from `get_prometheus_registry()`
(vllm/v1/metrics/prometheus.py, 0.28.0-0.33.0): prometheus_client's global REGISTRY with one API server (the
default), a fresh registry over prometheus_client's multiprocess files with `--api-server-count` > 1. The
guard's counters live in the engine and worker processes, which serve no HTTP. vLLM's stat-logger plugins
(`vllm.stat_logger_plugins`) run in the API server but only see the engine core's scheduler and iteration
stats, never a worker's counters; its multiprocess metrics are on only with several API servers, and turning
them on for the guard would change how vLLM aggregates its own gauges. So:

- the first guarded process of a server (the API server; with several API servers, the launcher that starts
  them) makes a directory and names it in SPECGUARD_METRICS_DIR, which every process it starts inherits (the
  name does not start with VLLM_, so vLLM's environment validation never sees it);
- every guarded process writes its counters there, as one small JSON file per process, replaced atomically
  from the guard's daemon thread when they changed (every FLUSH_S) and once more at clean shutdown;
- that first process registers a prometheus_client collector on REGISTRY, which sums the files when
  `/metrics` is scraped. A process that died keeps its last counts in the sum: counters never go backwards.

With several API servers vLLM exposes its multiprocess registry instead of REGISTRY, so the counters are not
on `/metrics` there; the log lines carry them in every case. Nothing here runs on a metadata build or a
launch.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from specguard._files import UnreadableFile, read_regular
from specguard.runtime.policy import POLICY

DIR_ENV = "SPECGUARD_METRICS_DIR"
FLUSH_S = 2.0
MAX_FILE_BYTES = 1 << 20
# metric name -> (snapshot key, labels, help)
FAMILIES = {
    "specguard_checks": ("checks_run", ("check", "site"), "Checks the runtime guard ran"),
    "specguard_violations": ("violations", ("check", "site"), "Violated invariants (raised or logged)"),
    "specguard_recorded": ("recorded", ("check", "site"), "Disagreements recorded, never raised"),
    "specguard_skips": ("skips", ("check", "site", "reason"), "Checks skipped (no host value to read)"),
    "specguard_guard_errors": ("guard_errors", ("check", "site"), "Failures inside the guard (serving went on)"),
    "specguard_guard_seconds": ("guard_ns", ("check", "site"), "Time the guard spent in its checks"),
}


class _State:
    directory: Path | None = None
    root_pid: int | None = None
    last_written: str | None = None
    collector: Any = None


STATE = _State()


def rows() -> dict[str, list[list[Any]]]:
    """This process's counters as label tuples plus a value, per snapshot key (the file's content)."""
    with POLICY._lock:
        out: dict[str, list[list[Any]]] = {
            "violations": [[*k, v] for k, v in POLICY.violations.items()],
            "recorded": [[*k, v] for k, v in POLICY.recorded.items()],
            "skips": [[*k, v] for k, v in POLICY.skips.items()],
            "guard_errors": [[*k, v] for k, v in POLICY.guard_errors.items()],
        }
        sites = list(POLICY.sites.items())
    out["checks_run"] = [[c, n, s.runs] for (c, n), s in sites if s.runs]
    out["guard_ns"] = [[c, n, s.ns] for (c, n), s in sites if s.ns]
    return {"mode": POLICY.mode, **out}  # type: ignore[dict-item]


def setup() -> None:
    """Join this server's metrics directory, or make it (and register the collector) in its first process."""
    named = os.environ.get(DIR_ENV)
    if named and Path(named).is_dir():
        STATE.directory = Path(named)
        return
    STATE.directory = Path(tempfile.mkdtemp(prefix="specguard-metrics-"))
    STATE.root_pid = os.getpid()
    os.environ[DIR_ENV] = str(STATE.directory)
    atexit.register(_remove_directory)
    with contextlib.suppress(ImportError):
        from prometheus_client import REGISTRY

        STATE.collector = Collector(STATE.directory)
        REGISTRY.register(STATE.collector)


def teardown() -> None:
    """Unregister the collector and forget the directory (uninstall)."""
    if STATE.collector is not None:
        with contextlib.suppress(Exception):
            from prometheus_client import REGISTRY

            REGISTRY.unregister(STATE.collector)
        STATE.collector = None
    if STATE.root_pid == os.getpid():
        _remove_directory()
        atexit.unregister(_remove_directory)
        if os.environ.get(DIR_ENV) == str(STATE.directory):
            del os.environ[DIR_ENV]
    STATE.directory = STATE.root_pid = STATE.last_written = None


def after_fork() -> None:
    """A forked child writes its own file, and never removes the directory its parent made."""
    STATE.root_pid = None
    STATE.last_written = None
    STATE.collector = None


def _remove_directory() -> None:
    if STATE.directory is not None and STATE.root_pid == os.getpid():
        shutil.rmtree(STATE.directory, ignore_errors=True)


def flush() -> None:
    """Write this process's counters when they changed since the last write (atomically: a reader sees the
    old file or the new one)."""
    directory = STATE.directory
    if directory is None:
        return
    text = json.dumps(rows(), sort_keys=True)
    if text == STATE.last_written:
        return
    final = directory / f"{os.getpid()}.json"
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    STATE.last_written = text


def _read(path: Path) -> dict[str, Any] | None:
    """One process's file, or None when it is not a small regular JSON file."""
    try:
        decoded = json.loads(read_regular(path, MAX_FILE_BYTES))
    except (UnreadableFile, ValueError):
        return None
    return decoded if isinstance(decoded, dict) else None


def totals(directory: Path) -> tuple[dict[str, dict[tuple[str, ...], float]], dict[str, int]]:
    """Every process's counters, added up: (per snapshot key, labels -> value), processes per mode."""
    sums: dict[str, dict[tuple[str, ...], float]] = defaultdict(lambda: defaultdict(float))
    modes: dict[str, int] = defaultdict(int)
    for path in sorted(directory.glob("*.json")):
        data = _read(path)
        if data is None:
            continue
        mode = data.get("mode")
        if isinstance(mode, str):
            modes[mode] += 1
        for key, labels, _ in FAMILIES.values():
            for row in data.get(key, ()):
                if (
                    isinstance(row, list)
                    and len(row) == len(labels) + 1
                    and all(isinstance(x, str) for x in row[:-1])
                    and isinstance(row[-1], int)
                ):
                    sums[key][tuple(row[:-1])] += row[-1]
    return sums, modes


class Collector:
    """A prometheus_client collector: the guard's counters over every process of this server."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        flush()  # this process's own counts, up to the scrape
        sums, modes = totals(self.directory)
        for name, (key, labels, doc) in FAMILIES.items():
            family = CounterMetricFamily(name, doc, labels=list(labels))
            scale = 1e-9 if key == "guard_ns" else 1
            for label_values, value in sorted(sums.get(key, {}).items()):
                family.add_metric(list(label_values), value * scale)
            yield family
        processes = GaugeMetricFamily(
            "specguard_processes", "Guarded vLLM processes of this server, by mode", labels=["mode"]
        )
        for mode, count in sorted(modes.items()):
            processes.add_metric([mode], count)
        yield processes

    def describe(self) -> list[Any]:
        return []  # collected only at scrape time (no files are read when it is registered)
