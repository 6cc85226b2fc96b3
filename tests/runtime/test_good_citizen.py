"""The guard as a good vLLM citizen (issue 9 item 2), in fresh interpreters loading the plugin the way vLLM
does: its variables are in vLLM's environment registry (no "Unknown vLLM environment variable", and
`--fail-on-environ-validation` passes) without changing vLLM's compile cache key; the startup line appears
before vLLM has configured logging; VLLM_SPECGUARD_STATS_INTERVAL logs counter lines from a daemon thread;
every process, forked children included, logs a final counter line at clean exit. With VLLM_SPECGUARD unset
none of it happens."""

from __future__ import annotations

import json
import os
import re
import sys
import threading

import pytest
from sg_runtime_helpers import run_in_venv

# Logging is left unconfigured, as in vLLM's API server when it loads plugins while adding its CLI arguments.
SCRIPT = r"""
import importlib.util, json, multiprocessing, os, sys, threading, time
import vllm.envs as envs

# specguard's own folder, located without importing it (a path test on "specguard" would also match a venv kept
# under ~/.cache/specguard, where vLLM's own getters live)
SPECGUARD_DIR = os.path.join(importlib.util.find_spec("specguard").submodule_search_locations[0], "")
from vllm.platforms.interface import Platform
import vllm.plugins

factors_before = envs.compile_factors()
vllm.plugins.load_general_plugins()
factors_after = envs.compile_factors()
Platform.validate_environ(True)  # what --fail-on-environ-validation runs: raises on an unknown VLLM_* name
report = {
    "registered": {n: n in envs.environment_variables for n in ("VLLM_SPECGUARD", "VLLM_SPECGUARD_STATS_INTERVAL")},
    "env_value": envs.VLLM_SPECGUARD if "VLLM_SPECGUARD" in envs.environment_variables else None,
    "same_compile_factors": factors_before == factors_after,
    "changed_compile_factors": sorted(k for k in set(factors_before) | set(factors_after)
                                      if factors_before.get(k, "absent") != factors_after.get(k, "absent")),
    # what of specguard sits in vLLM's environment code paths: the getters vLLM calls, compile_factors
    "specguard_in_envs": sorted(
        name for name, obj in [*envs.environment_variables.items(), ("compile_factors", envs.compile_factors)]
        if getattr(getattr(obj, "__code__", None), "co_filename", "").startswith(SPECGUARD_DIR)
    ),
    "threads": sorted(t.name for t in threading.enumerate() if t.name.startswith("specguard")),
    "parent_pid": os.getpid(),
}
if os.environ.get("VLLM_SPECGUARD"):
    import specguard.runtime as sg
    from specguard.runtime import reporting
    from vllm.v1.kv_cache_interface import MLAAttentionSpec
    import torch

    spec = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=576, dtype=torch.bfloat16)
    MLAAttentionSpec.merge([spec, spec])  # one check run in this process before the fork
    periodic = []
    emit = reporting.emit
    reporting.emit = lambda level, msg, *a: (periodic.append(a) if "every" in str(a) else None, emit(level, msg, *a))
    for _ in range(600):  # wait for two periodic lines (their timing is the thread's, not asserted)
        if len(periodic) >= 2:
            break
        time.sleep(0.1)
    report["periodic_lines"] = len(periodic)

    def child(queue):
        vllm.plugins.load_general_plugins()  # as vLLM's engine core and workers do in their processes
        queue.put({"pid": os.getpid(), "stats": sg.stats()})

    queue = multiprocessing.get_context("fork").SimpleQueue()
    proc = multiprocessing.get_context("fork").Process(target=child, args=(queue,))
    proc.start()
    report["child"] = queue.get()
    proc.join()
    report["child_exitcode"] = proc.exitcode
print("REPORT " + json.dumps(report))
"""


def _run(env_extra: dict[str, str]) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_SPECGUARD") and k != "VLLM_LOGGING_LEVEL"}
    env.update(env_extra)
    proc = run_in_venv(["-c", SCRIPT], env)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("REPORT "))
    return json.loads(line[len("REPORT ") :]), proc.stderr


def test_enabled_guard_is_a_good_citizen() -> None:
    report, stderr = _run({"VLLM_SPECGUARD": "1", "VLLM_SPECGUARD_STATS_INTERVAL": "1"})
    assert report["registered"] == {"VLLM_SPECGUARD": True, "VLLM_SPECGUARD_STATS_INTERVAL": True}
    assert report["env_value"] == "1"
    assert report["same_compile_factors"] is True  # torch.compile's cache key is vLLM's own
    assert report["specguard_in_envs"] == ["compile_factors"]  # the getters are os.environ.get itself
    assert "Unknown vLLM environment variable" not in stderr
    assert report["threads"] == ["specguard-stats"]
    assert report["periodic_lines"] >= 2
    parent, child = report["parent_pid"], report["child"]["pid"]

    # the startup line, though nothing configured logging (a handler of the guard's own, vLLM's layout)
    startup = [x for x in stderr.splitlines() if "specguard runtime guard (VLLM_SPECGUARD mode=raise" in x]
    assert len(startup) == 2, stderr[-3000:]
    assert startup[0].startswith("INFO ") and f"pid {parent})" in startup[0]
    assert f"pid {child})" in startup[1] and startup[1].endswith(f"(patches inherited from pid {parent})")
    assert "on vLLM 0.33.0: live [G0 metadata boundary, G1 FlashInfer paged wrappers" in startup[0]

    counters = [x for x in stderr.splitlines() if "specguard counters (" in x]
    every = [x for x in counters if f"(every 1s, pid {parent})" in x]
    assert len(every) >= 2
    finals = {int(m.group(1)): x for x in counters if (m := re.search(r"\(final, pid (\d+)\)", x))}
    assert set(finals) == {parent, child}  # the forked child logs its own final line at its clean exit
    final = json.loads(finals[parent].split("): ", 1)[1])
    assert final["checks_run"] == {"G3:MLAAttentionSpec.merge": 1} and final["violations"] == {}
    # the child counts its own checks: nothing ran there
    assert report["child"]["stats"]["checks_run"] == {} and report["child_exitcode"] == 0


def test_guard_off_but_configured_is_known_to_vllm_and_out_of_its_call_paths() -> None:
    """Issue 18 item 6: VLLM_SPECGUARD=0 puts the two names in vLLM's registry (strict validation accepts
    them) with the standard library's os.environ.get as their getters, and wraps nothing: no specguard code
    runs when vLLM reads its environment or computes compile_factors (which, as for any registered variable,
    then counts them)."""
    report, stderr = _run({"VLLM_SPECGUARD": "0"})
    assert report["registered"] == {"VLLM_SPECGUARD": True, "VLLM_SPECGUARD_STATS_INTERVAL": True}
    assert report["env_value"] == "0"
    assert report["specguard_in_envs"] == [] and report["threads"] == []
    assert report["changed_compile_factors"] == ["VLLM_SPECGUARD", "VLLM_SPECGUARD_STATS_INTERVAL"]
    assert "specguard" not in stderr


def test_unset_guard_does_nothing() -> None:
    report, stderr = _run({})
    assert report["registered"] == {"VLLM_SPECGUARD": False, "VLLM_SPECGUARD_STATS_INTERVAL": False}
    assert report["threads"] == [] and "specguard" not in stderr


class _Wait:
    """An Event stand-in whose wait() times out `n` times, then reports the stop."""

    def __init__(self, n: int) -> None:
        self.n = n

    def wait(self, timeout: float) -> bool:
        self.n -= 1
        return self.n < 0


def test_interval_thread_survives_a_failing_counter_line(monkeypatch) -> None:
    from specguard.runtime import reporting
    from specguard.runtime.policy import Policy

    policy = Policy(mode="warn")

    def broken_snapshot():
        raise RuntimeError("snapshot failed")

    monkeypatch.setattr(policy, "snapshot", broken_snapshot)
    monkeypatch.setattr(reporting, "POLICY", policy)
    reporting._tick(0.01, _Wait(3))  # three failing lines, then stop: nothing escapes the thread
    assert policy.guard_errors == {("stats", "VLLM_SPECGUARD_STATS_INTERVAL"): 3}


@pytest.mark.parametrize(
    "value, seconds", [(None, 60.0), ("", 60.0), ("0", None), ("off", None), ("2.5", 2.5), ("1", 1.0), ("1e3", 1e3)]
)
def test_interval_values(value, seconds) -> None:
    from specguard.runtime.reporting import parse_interval

    assert parse_interval(value) == seconds


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon", "1e-9", "0.5", "0.999"])
def test_bad_interval_values(value) -> None:
    """Issue 16 item 15: an interval below one second would flood the log (1e-9 gave 190 lines per second
    per process); it is a startup error that says what to use."""
    from specguard.runtime.policy import SpecGuardConfigError
    from specguard.runtime.reporting import parse_interval

    with pytest.raises(SpecGuardConfigError, match=r"use a number of seconds from 1 on \(unset: every 60s\)"):
        parse_interval(value)


def test_counters_are_exact_under_threads() -> None:
    """Issue 12 item 3: threads hammering one check site and one violation counter lose no count."""
    from specguard.runtime import invariants as inv
    from specguard.runtime.patching import run_check
    from specguard.runtime.policy import POLICY

    POLICY.reset_counters()
    mode = POLICY.mode
    POLICY.mode = "warn"
    site = POLICY.site("G1", "hammered")
    violation = inv.check_prefill_rows(5, 4, site="hammered", subject="w")
    threads, per_thread = 8, 20000

    def every_other(i: int) -> inv.Violation | None:
        return violation if i % 2 else None

    def hammer() -> None:
        for i in range(per_thread):
            run_check(site, every_other, i)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    try:
        workers = [threading.Thread(target=hammer) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        s = POLICY.snapshot()
    finally:
        sys.setswitchinterval(switch)
        POLICY.mode = mode
        POLICY.reset_counters()
    assert s["checks_run"]["G1:hammered"] == threads * per_thread
    assert s["violations"]["G1:hammered"] == threads * per_thread // 2


def test_a_bad_stats_interval_stops_register_before_anything_is_patched() -> None:
    """Issue 16 item 15, as vLLM meets it: `register()` raises the startup error before it imports the installer,
    so a rejected interval leaves nothing of the guard behind."""
    import subprocess

    script = (
        "import sys, specguard.runtime as sg\n"
        "try:\n    sg.register()\nexcept sg.SpecGuardConfigError as exc:\n    print('refused:', exc)\n"
        "print('installer imported:', 'specguard.runtime.install' in sys.modules)\n"
    )
    env = {**os.environ, "VLLM_SPECGUARD": "1", "VLLM_SPECGUARD_STATS_INTERVAL": "1e-9"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "refused: VLLM_SPECGUARD_STATS_INTERVAL='1e-9' is not a valid value" in out.stdout
    assert "installer imported: False" in out.stdout
