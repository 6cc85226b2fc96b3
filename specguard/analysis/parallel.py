"""Both cores, cheaply: one pool of worker processes per run, and two ways to hand it jobs.

The pool is forked once, before stage one, and its workers import libcst while the main process scans its share
of the files; stage two then runs in those already warm workers. Stage one has thousands of jobs, each cheaper
than pickling and scheduling it, so each process gets one shard of them (`run`); stage two has a few dozen costly
ones, sent one by one as the main process produces them (`run_as_produced`). A worker that dies (a native fault
in a parser) breaks the pool: the jobs it had not finished then rerun one at a time in fresh processes, and the
job that kills its process gets on_crash(job) instead of a result.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

R = TypeVar("R")
# How long, at least, the main process waits for its sibling's judgements once it has none left to take.
_PATIENCE = 30.0
Job = tuple[Any, ...]


def cores() -> int:
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(count, 8))


def _shards(count: int, shares: list[float]) -> list[list[int]]:
    """Job indices 0..count-1 dealt out so that shard i holds about shares[i] of them; interleaved, so that no
    shard gets a whole folder of large files."""
    shards: list[list[int]] = [[] for _ in shares]
    for index in range(count):
        target = min(range(len(shares)), key=lambda s: (len(shards[s]) + 1) / shares[s])
        shards[target].append(index)
    return shards


def _run_shard(fn: Callable[..., R], jobs: list[Job]) -> list[R]:
    return [fn(*job) for job in jobs]


class Workers:
    """The run's worker processes (none on a one-core machine or for a small run: then all work is local)."""

    def __init__(self, count: int, warm_up: Callable[[], None] | None = None) -> None:
        self.count = count
        self.pool: ProcessPoolExecutor | None = None
        if count:  # imported only here: a warm run never starts a process
            from concurrent.futures import ProcessPoolExecutor
            from multiprocessing import get_all_start_methods, get_context

            self.ctx = get_context("fork") if "fork" in get_all_start_methods() else get_context()
            self.pool = ProcessPoolExecutor(count, mp_context=self.ctx, initializer=warm_up)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def run(
        self,
        fn: Callable[..., R],
        jobs: Sequence[Job],
        *,
        on_crash: Callable[[Job], R],
        main_share: float,
        while_waiting: Callable[[], object] | None = None,
    ) -> list[R]:
        """fn(*job) for every job, in order, in one shard per process; the main process takes `main_share` of
        the jobs (it starts at once, while the workers first warm up), then runs `while_waiting` if a worker is
        still busy."""
        if self.pool is None or not jobs:
            return [fn(*job) for job in jobs]
        local, *remote = _shards(len(jobs), [main_share] + [(1.0 - main_share) / self.count] * self.count)
        remote = [shard for shard in remote if shard]
        futures = [self.pool.submit(_run_shard, fn, [jobs[i] for i in shard]) for shard in remote]
        results: list[Any] = [None] * len(jobs)
        for i in local:
            results[i] = fn(*jobs[i])
        if while_waiting is not None and not all(future.done() for future in futures):
            while_waiting()
        from concurrent.futures.process import BrokenProcessPool

        for shard, future in zip(remote, futures, strict=True):
            try:
                for i, result in zip(shard, future.result(), strict=True):
                    results[i] = result
            except BrokenProcessPool:
                for i in shard:
                    results[i] = self._isolated(fn, jobs[i], on_crash)
        return results

    def run_as_produced(self, fn: Callable[..., R], jobs: Iterable[Job], *, on_crash: Callable[[Job], R]) -> list[R]:
        """fn(*job) for every job, in order, none in the main process: each job goes to the workers as soon as
        `jobs` yields it, so the workers run the first jobs while the main process is still producing the rest."""
        if self.pool is None:
            return [fn(*job) for job in jobs]
        from concurrent.futures.process import BrokenProcessPool

        submitted: list[tuple[Job, Future[R] | None]] = []
        for job in jobs:
            try:
                submitted.append((job, self.pool.submit(fn, *job)))
            except BrokenProcessPool:  # an earlier job killed a worker: this one runs isolated below
                submitted.append((job, None))
        results = []
        for job, future in submitted:
            try:
                if future is None:
                    raise BrokenProcessPool
                results.append(future.result())
            except BrokenProcessPool:
                results.append(self._isolated(fn, job, on_crash))
        return results

    def shared(self, fn: Callable[[int], R], count: int, patience: float = _PATIENCE) -> list[R]:
        """fn(i) for i in range(count), in this process and in one forked from it now (so it holds all this one
        has computed: the project's index, the bytes read), each taking the next i from a shared counter: the
        caller orders the work largest first. fn must leave nothing in its process that the run needs: the
        sibling's results come back by pipe, and what the sibling took but did not send runs here: where it
        died, or where it has not answered within `patience` seconds (or four times what this process took)
        after this process ran out of work, as a child forked beside threads can deadlock."""
        if self.pool is None or count < 2:
            return [fn(i) for i in range(count)]
        counter = self.ctx.Value("i", 0)

        def take() -> int:
            with counter.get_lock():
                counter.value += 1
                return counter.value - 1

        reader, writer = self.ctx.Pipe(duplex=False)

        def sibling() -> None:
            try:
                writer.send(_taken(fn, take, count))
            finally:
                os._exit(0)  # nothing of the parent's (its pool, its atexit handlers) may run here

        process = self.ctx.Process(target=sibling, daemon=True)
        process.start()
        writer.close()
        started = time.monotonic()
        results = dict(_taken(fn, take, count))
        if reader.poll(max(patience, 4 * (time.monotonic() - started))):  # its answer, or its end
            with contextlib.suppress(EOFError, OSError):  # the sibling died: what it took runs below
                results.update(reader.recv())
        else:
            process.kill()
        process.join()
        return [results[i] if i in results else fn(i) for i in range(count)]

    def _isolated(self, fn: Callable[..., R], job: Job, on_crash: Callable[[Job], R]) -> R:
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        try:
            with ProcessPoolExecutor(1, mp_context=self.ctx) as pool:
                return pool.submit(fn, *job).result()
        except BrokenProcessPool:
            return on_crash(job)


def _taken(fn: Callable[[int], R], take: Callable[[], int], count: int) -> list[tuple[int, R]]:
    """(i, fn(i)) for each i this process takes until the counter passes `count`."""
    done = []
    while (i := take()) < count:
        done.append((i, fn(i)))
    return done
