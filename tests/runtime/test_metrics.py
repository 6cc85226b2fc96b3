"""The guard's counters on vLLM's Prometheus registry (issue 18, "counters an operator can scrape"): the
first guarded process of a server registers a collector on prometheus_client's REGISTRY (what vLLM's API
server serves at /metrics with one API server), and every guarded process of the server, started from it,
adds its counters through the directory it inherits. Here a second interpreter stands in for an engine or
worker process; the e2e tier scrapes a real server."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, generate_latest
from sg_runtime_helpers import common_metadata as _cm
from sg_runtime_helpers import run_in_venv

CHILD = r"""
import torch
from specguard.runtime import install
from vllm.v1.kv_cache_interface import MLAAttentionSpec
install.install("warn")
spec = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=576, dtype=torch.bfloat16)
for _ in range(3):
    MLAAttentionSpec.merge([spec, spec])
"""


def scrape() -> dict[str, float]:
    """The specguard samples of the registry vLLM serves at /metrics, as exposed text."""
    text = generate_latest(REGISTRY).decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(specguard_\w+(?:\{[^}]*\})?) (\S+)$", text, re.M)}


def test_counters_of_every_process_add_up_on_the_registry(cpu_builder, guard) -> None:
    from specguard.runtime import metrics

    guard("warn")
    directory = Path(os.environ[metrics.DIR_ENV])
    builder = cpu_builder()
    builder.build(0, _cm([4, 4]))
    builder.build(0, _cm([2, 2]))
    builder.build(0, _cm([4, 4], num_actual_tokens=12))  # a padded count: counted, warn mode goes on
    run_in_venv(["-c", CHILD], dict(os.environ))  # a process started by this one: it inherits the directory
    assert _child_files(directory) and (directory / f"{os.getpid()}{metrics.SUFFIX}").is_file()
    metrics_now = scrape()
    site = 'check="G0",site="CPUAttentionMetadataBuilder.build(target)"'
    assert metrics_now[f"specguard_checks_total{{{site}}}"] == 3.0
    assert metrics_now[f"specguard_violations_total{{{site}}}"] == 1.0
    assert metrics_now['specguard_checks_total{check="G3",site="MLAAttentionSpec.merge"}'] == 3.0  # the child's
    # the child has exited: its counts stay in the sums, and the server's guarded processes are this one
    assert metrics_now['specguard_processes{mode="warn"}'] == 1.0
    assert 0 < metrics_now[f"specguard_guard_seconds_total{{{site}}}"] < 1.0  # G0 times its own checks


def _child_files(directory: Path) -> list[str]:
    from specguard.runtime import metrics

    return [p.name for p in directory.glob(f"*{metrics.SUFFIX}") if p.name != f"{os.getpid()}{metrics.SUFFIX}"]


def test_the_process_count_is_of_processes_running_now(guard) -> None:
    """A guarded process still running (this one, and a child that waits) counts; one that exited (a vLLM
    helper such as the model registry's inspection subprocess) keeps its counts in the sums only."""
    import subprocess
    import sys

    from specguard import _datafile
    from specguard.runtime import metrics

    guard("warn")
    directory = Path(os.environ[metrics.DIR_ENV])
    exited = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    waiting = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        helper = metrics.Counts("warn", [("G3", "MLAAttentionSpec.merge", 2)], [], [], [], [], [])
        for pid in (int(exited.stdout), waiting.pid, 0, -1):
            (directory / f"{pid}{metrics.SUFFIX}").write_bytes(_datafile.encode(metrics.KIND, helper))
        now = scrape()
        assert now['specguard_processes{mode="warn"}'] == 2.0  # this process and the waiting child
        assert now['specguard_checks_total{check="G3",site="MLAAttentionSpec.merge"}'] == 8.0  # every file counts
    finally:
        waiting.communicate(b"")


def test_a_process_outliving_the_server_s_first_one_stops_writing_quietly(guard) -> None:
    """At shutdown the API server removes the directory as it exits, and a worker still ticking then has nowhere
    to write: that is the end of /metrics, not a failure of the guard (it was logged as one, every shutdown)."""
    import shutil

    from specguard.runtime import metrics
    from specguard.runtime.policy import POLICY

    guard("warn")
    directory = Path(os.environ[metrics.DIR_ENV])
    metrics.flush()
    POLICY.site("G3", "MLAAttentionSpec.merge").hit()  # changed counters: the next flush has something to write
    shutil.rmtree(directory)
    metrics.flush()
    assert metrics.STATE.directory is None and not directory.exists() and not POLICY.guard_errors


def test_a_write_that_fails_in_a_directory_that_is_there_still_fails(guard, monkeypatch) -> None:
    from specguard.runtime import metrics

    guard("warn")

    def missing_parent(path, data, mode=None, **where):  # type: ignore[no-untyped-def]
        raise FileNotFoundError(2, "No such file or directory", str(path))

    monkeypatch.setattr(metrics._datafile, "replace_atomically", missing_parent)
    metrics.STATE.last_written = None
    with pytest.raises(FileNotFoundError):
        metrics.flush()


def test_files_that_are_not_a_process_counters_are_ignored(guard) -> None:
    from specguard.runtime import metrics

    guard("raise")
    directory = Path(os.environ[metrics.DIR_ENV])
    from specguard import _datafile

    (directory / f"1{metrics.SUFFIX}").write_text("{not msgpack")
    (directory / f"2{metrics.SUFFIX}").write_bytes(
        _datafile.encode(metrics.KIND, {"checks_run": [["G0", "x", "many"]]})
    )
    (directory / f"3{metrics.SUFFIX}").write_bytes(_datafile.encode("another-kind", metrics.counts()))
    os.mkfifo(directory / f"4{metrics.SUFFIX}")  # a FIFO would block a plain open
    (directory / f"5{metrics.SUFFIX}").symlink_to("/dev/zero")
    assert not any(k.startswith("specguard_checks_total{") for k in scrape())  # and the scrape did not hang


def test_uninstall_leaves_nothing_of_specguard_in_vllm_or_prometheus(cpu_builder, guard) -> None:
    """Issue 18 item 6: after uninstall() nothing of the guard is left where vLLM or a scrape would meet it."""
    import vllm.envs as envs

    from specguard.runtime import install, metrics, reporting, vllm_env

    compile_factors = envs.compile_factors
    vllm_env.register_env_vars()  # as register() does when vLLM loads the plugin
    guard("raise")
    directory = Path(os.environ[metrics.DIR_ENV])
    assert envs.compile_factors is not compile_factors and "VLLM_SPECGUARD" in envs.environment_variables
    ticker = reporting._lines.ticker
    assert ticker is not None and ticker.is_alive() and "specguard_" in generate_latest(REGISTRY).decode()
    install.uninstall()
    assert envs.compile_factors is compile_factors
    assert not any(name.startswith("VLLM_SPECGUARD") for name in envs.environment_variables)
    assert "specguard_" not in generate_latest(REGISTRY).decode()
    assert metrics.DIR_ENV not in os.environ and not directory.exists()
    deadline = time.monotonic() + 10
    while ticker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name.startswith("specguard") for t in threading.enumerate())
    assert not install.STATE.installed and not install.STATE.active
