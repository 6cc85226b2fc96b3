"""The e2e tier's server scenarios: each starts one real server, serves, optionally injects a fault, stops it,
and keeps what happened (outputs, errors, exit codes, the log) for several tests to assert on. A server costs
about a minute or more to start on a 2-core machine, so each scenario runs once per session, on first use.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import openai
from e2e_server import FAULT_ENV, Server, processes, server_env

PROMPTS = [
    "the draft model serves every request",
    "speculative decode step the tokens the tokens",
    "a b a b a b a b",
    "guard check guard check guard check",
    "tiny random weights and a tiny tokenizer",
]
# Sent together so metadata builds see batches of several requests (not compared across servers: batching
# depends on timing).
BATCH = ["one two three", "tokens model tokens model", "launch builder builds", "metadata attention query"]
MAX_TOKENS = 32
SPEC_TOKENS = 3
STATS_INTERVAL_S = 2
COUNTER_WAIT_S = 30
FAULT_EXIT_WAIT_S = 120

STARTUP_LINE = "specguard runtime guard (VLLM_SPECGUARD mode="
COUNTER_LINE = re.compile(r"specguard counters \((?P<kind>[^,]+), pid (?P<pid>\d+)\): (?P<json>\{.*\})\s*$")
STARTUP_PID = re.compile(r"specguard runtime guard \(VLLM_SPECGUARD mode=(?P<mode>\w+), pid (?P<pid>\d+)\)")
G0_MESSAGE = re.compile(r"\[specguard G0 [^\]]*\] (?P<site>\S+).*")
# what the fault plugin logs the first time it breaks a build in a process
INJECTED = re.compile(
    r"e2e-fault-plugin: injecting '(?P<kind>\w+)' into the draft metadata build "
    r"\(num_actual_tokens (?P<before>\d+) -> (?P<after>\d+), "
    r"query_start_loc_cpu \[(?P<qsl>[^\]]*)\] -> \[(?P<qsl_after>[^\]]*)\]\)"
)


@dataclass(frozen=True)
class Scenario:
    method: str  # draft_model | ngram | eagle
    guard: str | None  # VLLM_SPECGUARD, None = unset
    fault: str | None = None  # pad | shift: injected after the healthy phase
    args: tuple[str, ...] = ()

    def speculative_config(self, models: Path) -> dict:
        config: dict = {"method": self.method, "num_speculative_tokens": SPEC_TOKENS}
        if self.method == "ngram":
            config.update(prompt_lookup_min=2, prompt_lookup_max=3)
        else:
            config["model"] = str(models / ("eagle" if self.method == "eagle" else "draft"))
        return config


SCENARIOS = {
    "draft_model": Scenario("draft_model", "1", fault="pad"),
    "ngram": Scenario("ngram", "1"),
    "eagle": Scenario("eagle", "1", fault="shift"),
    "dp2": Scenario("draft_model", "1", args=("--data-parallel-size", "2")),
    "off": Scenario("draft_model", None),
    "warn": Scenario("draft_model", "warn", fault="pad"),
}


@dataclass
class Run:
    scenario: Scenario
    server: Server
    outputs: list[str] = field(default_factory=list)
    batch_outputs: list[str] = field(default_factory=list)
    healthy_log: str = ""  # the log once every guarded process logged counters after the healthy requests
    fault_error: BaseException | None = None
    fault_outputs: list[str] = field(default_factory=list)
    fault_exit: int | None = None  # raise mode: how the server ended by itself after the violation
    stop_code: int | None = None
    log: str = ""  # everything, after the server is gone

    def counters(self, log: str | None = None, kind: str | None = None) -> list[tuple[int, str, dict]]:
        """(pid, kind, snapshot) of every counter line, in log order; kind "final" or "every 2s"."""
        found = []
        for line in (self.log if log is None else log).splitlines():
            m = COUNTER_LINE.search(line)
            if m and (kind is None or m["kind"] == kind):
                found.append((int(m["pid"]), m["kind"], json.loads(m["json"])))
        return found

    def startup_pids(self, log: str | None = None) -> dict[int, str]:
        """pid -> mode of every process that logged the guard's startup line."""
        lines = (self.log if log is None else log).splitlines()
        return {int(m["pid"]): m["mode"] for m in map(STARTUP_PID.search, lines) if m}

    def vllm_processes(self) -> dict[int, str]:
        """pid -> role of the vLLM processes that load plugins (the DP coordinator loads none)."""
        return {pid: role for pid, role in processes(self.log).items() if "Coordinator" not in role}


def start(scenario: Scenario, python: str, models: Path, workdir: Path) -> Server:
    extra = {FAULT_ENV: str(workdir / "fault"), "VLLM_DISABLE_COMPILE_CACHE": "1"}
    if scenario.guard is not None:
        extra["VLLM_SPECGUARD_STATS_INTERVAL"] = str(STATS_INTERVAL_S)
    args = ["--dtype", "float32", "--max-model-len", "512", "--fail-on-environ-validation"]
    args += ["--shutdown-timeout", "30", "--speculative-config", json.dumps(scenario.speculative_config(models))]
    args += list(scenario.args)
    return Server(python, models / "target", args, server_env(scenario.guard, extra), workdir / "server.log")


def wait_for_counters(run: Run, since: int) -> str:
    """The log once every guarded process has logged a counter line after offset `since`."""
    deadline = time.monotonic() + COUNTER_WAIT_S
    while True:
        log = run.server.log()
        expected = set(run.startup_pids(log))
        seen = {pid for pid, _, _ in run.counters(log[since:])}
        if expected <= seen or time.monotonic() > deadline:
            return log
        time.sleep(0.5)


def execute(scenario: Scenario, python: str, models: Path, workdir: Path) -> Run:
    workdir.mkdir(parents=True, exist_ok=True)
    run = Run(scenario, start(scenario, python, models, workdir))
    try:
        run.server.start()
        run.outputs = run.server.complete(PROMPTS, MAX_TOKENS)
        run.batch_outputs = run.server.complete_concurrently(BATCH, MAX_TOKENS)
        run.healthy_log = wait_for_counters(run, len(run.server.log()))
        if scenario.fault:
            inject(run, workdir / "fault")
    finally:
        run.stop_code = run.server.stop()
        run.log = run.server.log()
    return run


def inject(run: Run, trigger: Path) -> None:
    trigger.write_text(run.scenario.fault or "")
    if run.scenario.guard == "warn":  # warn mode: serving goes on, the violations are counted
        mark = len(run.server.log())
        run.fault_outputs = run.server.complete(PROMPTS[:3], MAX_TOKENS)
        wait_for_counters(run, mark)
        return
    try:  # raise mode: the request fails, and the server goes down by itself
        run.fault_outputs = run.server.complete(PROMPTS[:1], MAX_TOKENS)
    except openai.APIError as exc:
        run.fault_error = exc
    run.fault_exit = run.server.wait_exit(FAULT_EXIT_WAIT_S)
