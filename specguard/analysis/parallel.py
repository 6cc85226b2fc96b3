"""Both cores, cheaply: the jobs split into one shard per core, each shard one task.

Per-job tasks cost more in pickling and scheduling than a stage-one scan of a file takes, so each worker gets one
shard, and the main process works through a shard of its own instead of waiting. A worker that dies (a native
fault in a parser) breaks the pool; the jobs of the shards it took then rerun one at a time in fresh processes,
and the job that kills its process gets on_crash(job) instead of a result.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_all_start_methods, get_context
from typing import Any, TypeVar

R = TypeVar("R")
Job = tuple[Any, ...]


def workers() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, 8))


def _shards(jobs: Sequence[Job], count: int, weight: Callable[[Job], int]) -> list[list[int]]:
    """Job indices in `count` shards of about equal weight (heaviest first, each to the lightest shard)."""
    shards: list[list[int]] = [[] for _ in range(count)]
    loads = [0] * count
    for index in sorted(range(len(jobs)), key=lambda i: -weight(jobs[i])):
        lightest = loads.index(min(loads))
        shards[lightest].append(index)
        loads[lightest] += weight(jobs[index])
    return shards


def _run_shard(fn: Callable[..., R], jobs: list[Job]) -> list[R]:
    return [fn(*job) for job in jobs]


def _isolated(fn: Callable[..., R], job: Job, ctx: Any, on_crash: Callable[[Job], R]) -> R:
    try:
        with ProcessPoolExecutor(1, mp_context=ctx) as pool:
            return pool.submit(fn, *job).result()
    except BrokenProcessPool:
        return on_crash(job)


def run_sharded(fn: Callable[..., R], jobs: Sequence[Job], *, min_jobs: int, on_crash: Callable[[Job], R],
                weight: Callable[[Job], int] = lambda job: 1, main_shares: bool = True) -> list[R]:
    """fn(*job) for every job, in order. `main_shares=False` keeps jobs that could crash the interpreter out of
    the main process."""
    count = workers()
    if len(jobs) < min_jobs or count == 1:
        return [fn(*job) for job in jobs]
    ctx = get_context("fork") if "fork" in get_all_start_methods() else get_context()
    shards = _shards(jobs, count, weight)
    results: list[Any] = [None] * len(jobs)
    local, remote = (shards[0], shards[1:]) if main_shares else ([], shards)
    with ProcessPoolExecutor(len(remote), mp_context=ctx) as pool:
        futures = [pool.submit(_run_shard, fn, [jobs[i] for i in shard]) for shard in remote]
        for i in local:
            results[i] = fn(*jobs[i])
        for shard, future in zip(remote, futures, strict=True):
            try:
                for i, result in zip(shard, future.result(), strict=True):
                    results[i] = result
            except BrokenProcessPool:
                for i in shard:
                    results[i] = _isolated(fn, jobs[i], ctx, on_crash)
    return results
