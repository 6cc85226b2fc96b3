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
- every guarded process writes its counters there, as one small file per process in specguard's data-file
  format (msgpack, decoded into `Counts` with every field's type checked: specguard/_datafile.py), replaced
  atomically from the guard's daemon thread when they changed (every FLUSH_S) and once more at clean shutdown;
- that first process registers a prometheus_client collector on REGISTRY, which sums the files when
  `/metrics` is scraped. A process that exited keeps its last counts in the sum (counters never go
  backwards) and leaves the count of processes.

With several API servers vLLM exposes its multiprocess registry instead of REGISTRY, so the counters are not
on `/metrics` there; the log lines carry them in every case. Nothing here runs on a metadata build or a
launch.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from specguard import _datafile
from specguard._files import UnreadableFile, read_regular
from specguard.runtime.policy import POLICY

DIR_ENV = "SPECGUARD_METRICS_DIR"
FLUSH_S = 2.0
MAX_FILE_BYTES = 1 << 20
KIND = "runtime-counters"
SUFFIX = ".counts"


class Counts(msgspec.Struct):
    """One process's counters: label values and a count per row."""

    mode: str
    checks_run: list[tuple[str, str, int]]
    violations: list[tuple[str, str, int]]
    recorded: list[tuple[str, str, int]]
    skips: list[tuple[str, str, str, int]]
    guard_errors: list[tuple[str, str, int]]
    guard_ns: list[tuple[str, str, int]]


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
    last_written: bytes | None = None
    collector: Any = None


STATE = _State()


def counts() -> Counts:
    """This process's counters, as the file holds them."""
    with POLICY._lock:
        pairs = {
            name: [(*key, n) for key, n in getattr(POLICY, name).items()]
            for name in ("violations", "recorded", "skips", "guard_errors")
        }
        sites = list(POLICY.sites.items())
    return Counts(
        mode=POLICY.mode,
        checks_run=[(c, n, s.runs) for (c, n), s in sites if s.runs],
        guard_ns=[(c, n, s.ns) for (c, n), s in sites if s.ns],
        **pairs,
    )


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
    current = counts()
    data = _datafile.encode(KIND, current)
    if data != STATE.last_written:
        try:
            _datafile.write(directory / f"{os.getpid()}{SUFFIX}", KIND, current)
        except FileNotFoundError:
            if directory.is_dir():
                raise
            # The server's first process removed it on its way out (its workers may outlive it by a moment):
            # nothing serves /metrics any more, so there is nothing to write, and no failure of the guard's.
            STATE.directory = None
            return
        STATE.last_written = data


def _read(path: Path) -> Counts | None:
    """One process's counters, or None for anything but a small regular file of that shape."""
    try:
        return _datafile.decode(read_regular(path, MAX_FILE_BYTES), KIND, Counts)
    except UnreadableFile:
        return None


def totals(directory: Path) -> tuple[dict[str, dict[tuple[str, ...], float]], dict[str, int]]:
    """Every process's counters, added up: (per snapshot key, labels -> value), and the processes running now
    per mode. A process that has exited keeps its counts in the sums (counters never go backwards) but is no
    longer one of the server's processes: vLLM's short-lived helpers load the plugins too (the model registry
    inspects a model class in a subprocess on a cache miss), and a worker that died is one fewer."""
    sums: dict[str, dict[tuple[str, ...], float]] = defaultdict(lambda: defaultdict(float))
    modes: dict[str, int] = defaultdict(int)
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        data = _read(path)
        if data is None:
            continue
        if _running(path.name.removesuffix(SUFFIX)):
            modes[data.mode] += 1
        for key, _, _ in FAMILIES.values():
            for *labels, n in getattr(data, key):
                sums[key][tuple(labels)] += n
    return sums, modes


def _running(pid: str) -> bool:
    """Whether the process a counts file is named after still runs (signal 0 checks, delivers nothing)."""
    try:
        number = int(pid)
        if number <= 0:  # 0 and negatives name process groups, not a process
            return False
        os.kill(number, 0)
    except (ValueError, OverflowError, ProcessLookupError):
        return False
    except PermissionError:  # it runs, as another user
        return True
    return True


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
            "specguard_processes", "Guarded vLLM processes of this server running now, by mode", labels=["mode"]
        )
        for mode, count in sorted(modes.items()):
            processes.add_metric([mode], count)
        yield processes

    def describe(self) -> list[Any]:
        return []  # collected only at scrape time (no files are read when it is registered)
