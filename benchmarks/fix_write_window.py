#!/usr/bin/env python3
"""How long the moment lasts in which another program's append could still be lost by `--fix` (issue 26 item 10).

    python benchmarks/fix_write_window.py [--runs N] [--no-record]

`rewrite_in_place` never writes over bytes another program appended: the part of a fix past the old end is
appended (O_APPEND), the rest written over the old content's own bytes. Only a fix that shortens the file has to
truncate it, and it truncates only after comparing the whole file again and checking its size. Where the kernel
grants a write lease (Linux, the user's own file on a local file system) no other program has the file open and
any that opens it waits until the fix is written; if specguard is held up past the kernel's lease-break-time (45 s
by default) the other program gets the file, the break signal disarms specguard's descriptor before its next call
and what it wrote is taken back (tests/test_files.py plays it at each call): nothing is left but the C-level step
from Python's signal check to the system call. Elsewhere two moments are left: from the return of the comparison's
last read to the first write over the old bytes (a same-size rewrite by another program there is written over),
and from the return of the last size check (fstat) to the truncation (ftruncate). This script measures the second
over N fixes that shorten a 30 KB file, and the first over N same-size fixes, with the calls on each side wrapped
to take a perf_counter_ns stamp right after the one returns and right before the other is called (so the numbers
include one Python call of each wrapper: an upper bound). It also times the whole rewrite with and without the
lease, for what the lease (and its break handler) costs.

Wall clock on a machine that may be shared: read the median; nothing here belongs in a unit test. Each run is
recorded in benchmarks/results.json (`fix_write_window/DATE`), where the docs' figures come from.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from specguard import _files

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results as results_file  # noqa: E402 - benchmarks/results.py, beside this script

OLD = b"x = 1  # a line of the file as it was\n" * 800  # about 30 KB
NEW = OLD[: len(OLD) // 2]  # a fix that shortens it
SAME_SIZE = OLD.replace(b"x = 1", b"y = 2")  # a fix that keeps its size


def _window(runs: int, folder: Path) -> list[int]:
    """ns between the return of the last fstat before a truncation and the call of that ftruncate."""
    real_fstat, real_ftruncate = os.fstat, os.ftruncate
    last_fstat = [0]
    gaps: list[int] = []

    def fstat(fd):  # type: ignore[no-untyped-def]
        result = real_fstat(fd)
        last_fstat[0] = time.perf_counter_ns()
        return result

    def ftruncate(fd, length):  # type: ignore[no-untyped-def]
        gaps.append(time.perf_counter_ns() - last_fstat[0])
        return real_ftruncate(fd, length)

    os.fstat, os.ftruncate = fstat, ftruncate  # type: ignore[assignment]
    try:
        _files._LEASES = False  # the path with a moment left
        for i in range(runs):
            path = folder / f"w{i % 8}.py"
            path.write_bytes(OLD)
            _files.rewrite_in_place(path, OLD, NEW)
    finally:
        os.fstat, os.ftruncate = real_fstat, real_ftruncate  # type: ignore[assignment]
        _files._LEASES = True
    return gaps


def _compare_window(runs: int, folder: Path) -> list[int]:
    """ns between the return of the comparison's last read and the first write over the file (a same-size fix, so
    the first write is over the old bytes): where another program's in-place rewrite would be written over."""
    real_read, real_pwrite = os.read, os.pwrite
    last_read = [0]
    gaps: list[int] = []

    def read(fd, n):  # type: ignore[no-untyped-def]
        result = real_read(fd, n)
        last_read[0] = time.perf_counter_ns()
        return result

    def pwrite(fd, data, offset):  # type: ignore[no-untyped-def]
        if last_read[0]:
            gaps.append(time.perf_counter_ns() - last_read[0])
            last_read[0] = 0
        return real_pwrite(fd, data, offset)

    os.read, os.pwrite = read, pwrite  # type: ignore[assignment]
    try:
        _files._LEASES = False
        for i in range(runs):
            path = folder / f"c{i % 8}.py"
            path.write_bytes(OLD)
            last_read[0] = 0
            _files.rewrite_in_place(path, OLD, SAME_SIZE)
    finally:
        os.read, os.pwrite = real_read, real_pwrite  # type: ignore[assignment]
        _files._LEASES = True
    return gaps


def _whole(runs: int, folder: Path, leases: bool) -> list[int]:
    took = []
    _files._LEASES = leases
    try:
        for i in range(runs):
            path = folder / f"r{i % 8}.py"
            path.write_bytes(OLD)
            start = time.perf_counter_ns()
            _files.rewrite_in_place(path, OLD, NEW)
            took.append(time.perf_counter_ns() - start)
    finally:
        _files._LEASES = True
    return took


def _stats(values: list[int]) -> dict[str, float]:
    """Median, p99 and max of ns values, in us, rounded as the script prints them."""
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    median = statistics.median(ordered)
    return {
        "median_us": round(median / 1000, 2),
        "p99_us": round(p99 / 1000, 2),
        "max_us": round(ordered[-1] / 1000, 2),
    }


def _summary(values: list[int]) -> str:
    s = _stats(values)
    return f"median {s['median_us']:.2f} us, p99 {s['p99_us']:.2f} us, max {s['max_us']:.2f} us"


def summary(started: datetime, runs: int, machine: dict, measured: dict[str, list[int]]) -> dict:
    """A run as benchmarks/results.json keeps it: each measure's median, p99 and max, as the script prints them."""
    return {
        "script": "benchmarks/fix_write_window.py",
        "date": started.isoformat(timespec="minutes"),
        **machine,
        "runs": runs,
        **{name: _stats(values) for name, values in measured.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20000)
    results_file.add_record_options(parser)
    args = parser.parse_args()
    started = datetime.now(timezone.utc)
    machine = results_file.machine()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        gaps = _window(args.runs, folder)
        assert len(gaps) == args.runs, "each fix truncated once"
        print(f"window left without a lease (fstat -> ftruncate), {args.runs} fixes: {_summary(gaps)}")
        compared = _compare_window(args.runs, folder)
        print(f"window left without a lease (compare -> first write), {args.runs} fixes: {_summary(compared)}")
        without = _whole(args.runs // 4, folder, False)
        print(f"whole rewrite without a lease: {_summary(without)}")
        leased = _whole(args.runs // 4, folder, True)
        print(f"whole rewrite with the lease (no window): {_summary(leased)}")
    if not args.no_record:
        key = results_file.key("fix_write_window", started)
        measured = {
            "fstat_to_ftruncate": gaps,
            "compare_to_first_write": compared,
            "whole_rewrite_without_lease": without,
            "whole_rewrite_with_lease": leased,
        }
        results_file.record(key, summary(started, args.runs, machine, measured), args.results)
        print(f"recorded {key} in {args.results}")


if __name__ == "__main__":
    main()
