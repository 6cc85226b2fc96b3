"""`VLLM_SPECGUARD` unset in a real server: the guard patches nothing and writes nothing, and greedy outputs are
the same with the guard off, in warn mode and in raise mode (the guard never changes what vLLM computes)."""

from __future__ import annotations

import re

from e2e_server import guard_lines

PROBE = re.compile(r"e2e-fault-plugin probe \(pid (?P<pid>\d+)\): specguard modules loaded: (?P<modules>\S+)")
# What installing the guard imports; with the guard off none of it may be loaded in any process.
INSTALLING = ("specguard.runtime.install", "specguard.runtime.patching")


def loaded_modules(run) -> list[set[str]]:
    """The specguard modules loaded in each worker, as the fault plugin's probe saw them while serving."""
    return [set(m["modules"].split(",")) for m in map(PROBE.search, run.log.splitlines()) if m]


def test_greedy_outputs_identical_with_the_guard_off_warn_and_on(scenario_run) -> None:
    off, warn, on = scenario_run("off"), scenario_run("warn"), scenario_run("draft_model")
    assert off.outputs == on.outputs
    assert off.outputs == warn.outputs


def test_guard_off_patches_nothing_and_logs_nothing(scenario_run) -> None:
    off = scenario_run("off")
    assert guard_lines(off.log) == []
    probes = loaded_modules(off)
    assert probes, "the probe saw no draft metadata build"
    for modules in probes:
        assert not set(INSTALLING) & modules, modules
    # the probe does see the installing modules when the guard is on (so the check above can fail)
    assert all(set(INSTALLING) <= modules for modules in loaded_modules(scenario_run("draft_model")))


def test_guard_off_serves_and_shuts_down_cleanly(scenario_run) -> None:
    off = scenario_run("off")
    assert off.stop_code == 0 and all(off.outputs) and all(off.batch_outputs)
    assert off.counters() == []
    assert "vllm:" in off.healthy_metrics and "specguard" not in off.healthy_metrics
