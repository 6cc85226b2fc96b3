"""The first seed's desync, made in a real server by the test-only fault plugin (tests/e2e/fault_plugin): the
draft path hands the metadata build a padded token count, or a shifted query_start_loc. Guard on: G0 stops it
before any backend reads it, names the numbers and the static rule, the request fails, and the server goes
down by itself (nothing hangs). Warn mode: logged once per site, counted, and serving goes on with the same
greedy outputs (speculation never changes what the target decides)."""

from __future__ import annotations

import re
from collections import Counter

import openai
from e2e_server import pid_of
from scenarios import G0_MESSAGE, INJECTED


def injected(run) -> re.Match:
    found = [m for m in map(INJECTED.search, run.log.splitlines()) if m]
    assert found, "the fault plugin injected nothing"
    return found[0]


def g0_messages(run) -> list[str]:
    return [m.group(0) for m in map(G0_MESSAGE.search, run.log.splitlines()) if m]


def assert_failed_request_and_no_hang(run) -> None:
    # a 500 from the server, not a client timeout: the engine stopped on the violation instead of hanging
    assert isinstance(run.fault_error, openai.InternalServerError), repr(run.fault_error)
    assert run.fault_exit is not None, "the server did not exit after its engine died"
    assert "SpecGuardViolation: [specguard G0" in run.log


def test_raise_mode_padded_token_count(scenario_run) -> None:
    run = scenario_run("draft_model")
    assert_failed_request_and_no_hang(run)
    m = injected(run)
    assert m["kind"] == "pad" and int(m["after"]) == int(m["before"]) + 4
    real_tokens = m["qsl"].split(", ")[-1]
    message = g0_messages(run)[0]
    assert "build_for_drafting(draft)" in message, message
    assert f"query_start_loc_cpu[num_reqs] ({real_tokens}) != num_actual_tokens ({m['after']})" in message
    assert f"num_actual_tokens={m['after']}" in message and f"query_start_loc_cpu_end={real_tokens}" in message
    assert "SG103 padded-token-count" in message, message


def test_raise_mode_shifted_query_start_loc(scenario_run) -> None:
    run = scenario_run("eagle")
    assert_failed_request_and_no_hang(run)
    m = injected(run)
    assert m["kind"] == "shift" and m["qsl_after"].startswith("1, ")
    message = g0_messages(run)[0]
    assert "build_for_drafting(draft)" in message, message
    assert "query_start_loc_cpu starts at 1, not 0" in message, message
    shifted_end = m["qsl_after"].split(", ")[-1]
    assert f"num_actual_tokens={m['after']}" in message and f"query_start_loc_cpu_end={shifted_end}" in message
    assert "SG103 padded-token-count" in message, message


def test_warn_mode_logs_once_per_site_counts_and_serves(scenario_run) -> None:
    run = scenario_run("warn")
    assert injected(run)["kind"] == "pad"
    assert run.fault_outputs == run.outputs[: len(run.fault_outputs)]
    assert len(run.fault_outputs) == 3 and run.stop_code == 0
    warned = [x for x in run.log.splitlines() if "[specguard G0" in x and "warn mode" in x]
    per_site = Counter((pid_of(x), G0_MESSAGE.search(x)["site"]) for x in warned)
    assert per_site and set(per_site.values()) == {1}, warned
    final = {pid: snap for pid, _, snap in run.counters(kind="final")}
    counted = {pid: sum(v for k, v in snap["violations"].items() if k.startswith("G0:")) for pid, snap in final.items()}
    for pid in {pid for pid, _ in per_site}:
        assert counted[pid] > 1, final[pid]  # every faulty build counted, one logged
    healthy = run.counters(run.healthy_log)
    assert all(snap["violations"] == {} for _, _, snap in healthy)
