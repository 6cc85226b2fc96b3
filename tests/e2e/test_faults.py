"""Faults made in real servers by the test-only fault plugin (tests/e2e/fault_plugin), each the class of an
upstream bug: a padded token count in one speculative step, a count smaller than real, only the device copy of
query_start_loc shifted, and the first seed itself under DP=2 (a DP-padded count, only in batches that DP
padding would pad). Raise mode: G0 stops the build before any backend reads it and names the numbers and the
static rule; vLLM then ends the engine, so every request in flight fails and the server goes down by itself, as
docs/runtime-guard.md (the operator's page) says. Warn mode: each kind of violation at a site is logged once,
every one is counted (log lines and /metrics), serving goes on with the same greedy outputs, and a build that
would read outside its buffers is stopped all the same."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import openai
from e2e_server import pid_of
from scenarios import G0_MESSAGE, INJECTED, metrics

OPERATORS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "runtime-guard.md"


def injected(log: str, kind: str) -> list[re.Match]:
    found = [m for m in map(INJECTED.search, log.splitlines()) if m and m["kind"] == kind]
    assert found, f"the fault plugin injected no {kind!r}"
    return found


def g0_messages(log: str) -> list[str]:
    return [m.group(0) for m in map(G0_MESSAGE.search, log.splitlines()) if m]


def assert_the_engine_ended(phase, check: str = "G0") -> None:
    """What raise mode does to a server (and what the operator's page promises): every request in
    flight fails with a 500, /health stops answering 200, and the server exits by itself."""
    assert phase.errors and not phase.outputs, (phase.outputs, phase.errors)
    assert all(isinstance(e, (openai.InternalServerError, openai.APIConnectionError)) for e in phase.errors)
    assert phase.health in (503, None), phase.health  # 503, or already gone
    assert phase.exit is not None, "the server did not exit after its engine died"
    assert f"SpecGuardViolation: [specguard {check}" in phase.log


def test_raise_mode_a_padded_count_in_one_speculative_step_ends_the_engine(scenario_run) -> None:
    run = scenario_run("draft_model")
    phase = run.phase("pad@1")
    assert_the_engine_ended(phase)
    assert len(phase.errors) == 3  # every request in flight
    m = injected(phase.log, "pad@1")[0]
    assert m["step"] == "1" and int(m["after"]) == int(m["before"]) + 4
    real_tokens = m["qsl"].split(", ")[-1]
    message = g0_messages(phase.log)[0]
    assert "build_for_drafting(draft)" in message, message
    assert f"query_start_loc_cpu[num_reqs] ({real_tokens}) != num_actual_tokens ({m['after']})" in message
    assert "(this batch: NONE, dispatched by SpecDecodeBaseProposer)" in message  # the speculator's own dispatch
    assert "SG103 padded-token-count" in message, message
    operators = OPERATORS_PAGE.read_text()
    assert "every request in flight fails (HTTP 500), `/health` answers 503 and the API server exits" in operators


def test_raise_mode_only_the_device_copy_of_query_start_loc_shifted(scenario_run) -> None:
    phase = scenario_run("eagle").phase("desync")
    assert_the_engine_ended(phase)
    m = injected(phase.log, "desync")[0]
    assert m["qsl"] == m["qsl_after"] and m["dev"] != m["dev_after"]  # the host copy stayed right
    message = g0_messages(phase.log)[0]
    assert "build_for_drafting(draft)" in message, message
    before, after = m["dev"].split(", "), m["dev_after"].split(", ")
    first = next(i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b)
    assert f"query_start_loc (host memory, what the kernels read) holds {after[first]} at entry {first} " in message


STALE_STEP = re.compile(
    r"\[specguard G5 draft lengths\] \S+\.build_for_drafting\(draft\) \([^)]*\): draft step 2: "
    r"seq_lens \[(?P<now>[\d, .]*)\] do not follow from step 1's \[(?P<before>[\d, .]*)\] plus this step's query "
    r"tokens \[[\d, .]*\]; \d+ of \d+ requests? differ, first request \d+: (?P<got>\d+) where (?P<want>\d+) "
    r"was expected"
)


def test_raise_mode_stale_lengths_in_a_draft_step_end_the_engine(scenario_run) -> None:
    """EAGLE, draft step 2 handed the lengths of step 1 (right rows, stale values): G5 stops the build."""
    phase = scenario_run("eagle_stale").phase("stale@2")
    assert_the_engine_ended(phase, "G5")
    assert injected(phase.log, "stale@2")[0]["step"] == "2"
    found = [m for m in map(STALE_STEP.search, phase.log[phase.log_start :].splitlines()) if m]
    assert found, phase.log[-4000:]
    m = found[0]
    assert int(m["want"]) == int(m["got"]) + 1 and m["now"] == m["before"]
    assert "Likely cause: the step reuses the previous step's lengths" in m.string


def test_warn_mode_stale_lengths_are_logged_and_served(scenario_run) -> None:
    run = scenario_run("warn")
    stale = run.phase("stale@2")
    # greedy verification by the target: a stale draft changes what is proposed, never what is served
    assert not stale.errors and stale.outputs == run.outputs[: len(stale.outputs)] and len(stale.outputs) == 3
    lines = stale.log[stale.log_start :].splitlines()
    warned = [x for x in lines if STALE_STEP.search(x) and "warn mode: proceeds" in x]
    assert warned and len({pid_of(x) for x in warned}) == len(warned), warned  # once per process
    latest = {pid: snap for pid, _, snap in run.counters(stale.log)}
    for pid in {pid_of(x) for x in warned}:
        assert sum(v for k, v in latest[pid]["violations"].items() if k.startswith("G5:")) >= 1, latest[pid]


def test_warn_mode_two_faults_at_one_site_are_both_logged(scenario_run) -> None:
    run = scenario_run("warn")
    pad, short = run.phase("pad"), run.phase("short")
    # the padded count: logged once per site and kind, counted on every build, served with the same outputs
    assert not pad.errors and pad.outputs == run.outputs[: len(pad.outputs)] and len(pad.outputs) == 3
    warned = [x for x in pad.log[pad.log_start :].splitlines() if "[specguard G0" in x and "warn mode" in x]
    per_site = Counter((pid_of(x), G0_MESSAGE.search(x)["site"]) for x in warned)
    assert per_site and set(per_site.values()) == {1}, warned
    latest = {pid: snap for pid, _, snap in run.counters(pad.log)}
    for pid in {pid for pid, _ in per_site}:
        counted = sum(v for k, v in latest[pid]["violations"].items() if k.startswith("G0:"))
        assert counted > 1, latest[pid]  # every faulty build counted, one logged
    scraped = metrics(pad.metrics)
    assert sum(v for (name, _), v in scraped.items() if name == "specguard_violations_total") >= max(
        sum(snap["violations"].values()) for snap in latest.values()
    )
    # a count smaller than real at the same site: a new kind, logged; it would read outside the batch's rows,
    # so warn mode stops it too, and the engine ends as in raise mode
    assert_the_engine_ended(short)
    m = injected(short.log, "short")[0]
    stopped = [x for x in short.log[short.log_start :].splitlines() if "Stopped although the guard runs in warn" in x]
    assert stopped, short.log[-3000:]
    assert f"!= num_actual_tokens ({m['after']})" in stopped[0]
    sites = {G0_MESSAGE.search(x)["site"] for x in warned + stopped}
    assert len(sites) == 1  # the same site, two kinds, both logged
    healthy = run.counters(run.healthy_log)
    assert all(snap["violations"] == {} for _, _, snap in healthy)


def test_dp2_the_seed_is_caught_only_in_batches_padding_pads(scenario_run) -> None:
    """DP=2, warn mode: a draft step's count raised to its bucket (the next power of two) wherever it is not one
    already; G0 logs those builds with SG103, passes the draft steps already of a bucket's size, both ranks
    serve on."""
    run = scenario_run("dp2")
    phase = run.phase("bucket")
    assert not phase.errors and len(phase.outputs) == 3  # warn mode: the padded count is served
    for m in injected(phase.log, "bucket"):
        before, after = int(m["before"]), int(m["after"])
        assert after == 1 << (before - 1).bit_length() > before, m.group(0)
    messages = [x for x in phase.log[phase.log_start :].splitlines() if "[specguard G0" in x and "warn mode" in x]
    assert messages
    for message in messages:
        assert "build_for_drafting(draft)" in message and "SG103 padded-token-count" in message, message
        numbers = dict(re.findall(r"(num_actual_tokens|query_start_loc_cpu_end)=(\d+)", message))
        assert int(numbers["num_actual_tokens"]) > int(numbers["query_start_loc_cpu_end"]), message
    # only the padded batches: fewer violations than draft builds while the fault was on
    healthy = {pid: snap for pid, _, snap in run.counters(run.healthy_log)}
    final = {pid: snap for pid, _, snap in run.counters(kind="final")}
    for pid, role in run.vllm_processes().items():
        if "Worker" in role:
            drafts = g0_draft_builds(final[pid]) - g0_draft_builds(healthy[pid])
            violations = sum(final[pid]["violations"].values())
            assert 0 < violations < drafts, (pid, violations, drafts)
    assert run.stop_code == 0


def g0_draft_builds(snapshot: dict) -> int:
    return sum(n for key, n in snapshot["checks_run"].items() if key.startswith("G0:") and key.endswith("(draft)"))
