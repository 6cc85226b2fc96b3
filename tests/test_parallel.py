"""The worker pool keeps every job's result in its job's place, whichever process ran it."""

from __future__ import annotations

import os
import time

from specguard.analysis.parallel import Workers, _shards


def _square_and_pid(n: int) -> tuple[int, int]:
    return n * n, os.getpid()


def _never(job: tuple[int, ...]) -> tuple[int, int]:
    raise AssertionError(f"no worker crashed, yet {job} was reported as crashed")


def test_shards_deal_out_every_job_once_in_the_given_shares() -> None:
    shards = _shards(3231, [0.65, 0.35])
    assert sorted(i for shard in shards for i in shard) == list(range(3231))
    assert [len(shard) for shard in shards] == [2100, 1131]


def test_run_splits_between_the_main_process_and_the_workers_in_order() -> None:
    with Workers(1) as pool:
        results = pool.run(_square_and_pid, [(n,) for n in range(40)], on_crash=_never, main_share=0.5)
    assert [value for value, _ in results] == [n * n for n in range(40)]
    assert {pid for _, pid in results} - {os.getpid()}, "no job ran in the worker"
    assert os.getpid() in {pid for _, pid in results}, "the main process took no share"


def test_run_as_produced_sends_each_job_to_the_workers_as_it_is_produced() -> None:
    produced: list[int] = []

    def jobs():  # type: ignore[no-untyped-def]
        for n in range(12):
            produced.append(n)
            yield (n,)

    with Workers(1) as pool:
        results = pool.run_as_produced(_square_and_pid, jobs(), on_crash=_never)
    assert produced == list(range(12))
    assert [value for value, _ in results] == [n * n for n in range(12)]
    assert os.getpid() not in {pid for _, pid in results}, "a job ran in the main process"


def test_without_workers_everything_runs_here() -> None:
    with Workers(0) as pool:
        results = pool.run_as_produced(_square_and_pid, iter([(3,), (4,)]), on_crash=_never)
    assert results == [(9, os.getpid()), (16, os.getpid())]


def _slow_in_a_worker(n: int, main: int) -> int:
    if os.getpid() != main:
        time.sleep(0.5)  # the worker is still busy when the main process has done its share
    return n


def test_the_main_process_uses_its_wait_for_the_workers() -> None:
    waited: list[bool] = []
    with Workers(1) as pool:
        jobs = [(n, os.getpid()) for n in range(4)]
        results = pool.run(
            _slow_in_a_worker, jobs, on_crash=_never, main_share=0.5, while_waiting=lambda: waited.append(True)
        )
    assert results == [0, 1, 2, 3]
    assert waited == [True]
    with Workers(0) as pool:  # no worker to wait for
        pool.run(_slow_in_a_worker, jobs, on_crash=_never, main_share=0.5, while_waiting=lambda: waited.append(False))
    assert waited == [True]


def test_shared_work_runs_here_and_in_a_forked_sibling_in_order() -> None:
    parent = os.getpid()

    def slow_square(n: int) -> tuple[int, int]:
        time.sleep(0.01)  # long enough that the sibling, once forked, takes some
        return n * n, os.getpid()

    with Workers(1) as pool:
        results = pool.shared(slow_square, 30)
    assert [value for value, _ in results] == [n * n for n in range(30)]
    pids = {pid for _, pid in results}
    assert parent in pids and pids - {parent}, "both processes take work"


def test_shared_work_a_dead_sibling_took_reruns_here() -> None:
    parent = os.getpid()

    def dies_in_the_sibling(n: int) -> int:
        if os.getpid() != parent:
            os._exit(3)  # a native fault, as far as the parent can tell
        time.sleep(0.01)
        return n + 1

    with Workers(1) as pool:
        assert pool.shared(dies_in_the_sibling, 20) == [n + 1 for n in range(20)]


def test_shared_work_without_workers_runs_here() -> None:
    with Workers(0) as pool:
        assert pool.shared(lambda n: (n, os.getpid()), 3) == [(n, os.getpid()) for n in range(3)]


def test_shared_work_a_stuck_sibling_took_reruns_here() -> None:
    parent = os.getpid()

    def stuck_in_the_sibling(n: int) -> tuple[int, int]:
        if os.getpid() != parent:
            time.sleep(5)  # far longer than the patience below: stuck, as far as the parent can tell
        return n * 3, os.getpid()

    with Workers(1) as pool:
        results = pool.shared(stuck_in_the_sibling, 20, patience=0.2)
    assert [value for value, _ in results] == [n * 3 for n in range(20)]
    assert {pid for _, pid in results} == {parent}, "the parent waited for the stuck sibling's answer"
