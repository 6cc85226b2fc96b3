"""The e2e tier's server scenarios: each starts one real server, serves, optionally injects a fault, stops it,
and keeps what happened (outputs, errors, exit codes, the log) for several tests to assert on. A server costs
about a minute or more to start on a 2-core machine, so each scenario runs once per session, on first use.
"""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
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
    r"e2e-fault-plugin: injecting '(?P<kind>[\w@]+)' into the draft metadata build "
    r"\(num_actual_tokens (?P<before>\d+) -> (?P<after>\d+), "
    r"query_start_loc_cpu \[(?P<qsl>[^\]]*)\] -> \[(?P<qsl_after>[^\]]*)\], "
    r"query_start_loc \[(?P<dev>[^\]]*)\] -> \[(?P<dev_after>[^\]]*)\], "
    r"draft step (?P<step>\d+)\)"
)
# a counter on the registry vLLM serves at /metrics: name{labels} value
METRIC = re.compile(r"^(?P<name>specguard_\w+)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$", re.MULTILINE)


@dataclass(frozen=True)
class Scenario:
    method: str  # draft_model | ngram | eagle
    guard: str | None  # VLLM_SPECGUARD, None = unset
    # injected one after the other after the healthy phase (the fault plugin's kinds); a phase whose requests
    # fail ends the scenario (the engine is gone)
    faults: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    concurrent_faults: bool = False  # send a fault phase's requests together (else one at a time)

    @property
    def mode(self) -> str | None:
        return {"1": "raise", "warn": "warn"}.get(self.guard or "")

    def speculative_config(self, models: Path) -> dict:
        config: dict = {"method": self.method, "num_speculative_tokens": SPEC_TOKENS}
        if self.method == "ngram":
            config.update(prompt_lookup_min=2, prompt_lookup_max=3)
        else:
            config["model"] = str(models / ("eagle" if self.method == "eagle" else "draft"))
        return config


SCENARIOS = {
    # a padded count in one speculative step only; every request in flight then fails with the engine
    "draft_model": Scenario("draft_model", "1", faults=("pad@1",), concurrent_faults=True),
    "ngram": Scenario("ngram", "1"),
    # only the copy of query_start_loc the kernels read is shifted (host memory on vLLM's CPU build)
    "eagle": Scenario("eagle", "1", faults=("desync",)),
    # stale lengths in the last draft step (EAGLE, raise mode): the right rows, the previous step's values
    "eagle_stale": Scenario("eagle", "1", faults=("stale@2",)),
    # warn mode, DP=2: the seed's padded count, only in batches that padding pads
    "dp2": Scenario(
        "draft_model", "warn", faults=("bucket",), args=("--data-parallel-size", "2"), concurrent_faults=True
    ),
    "off": Scenario("draft_model", None),
    # stale lengths in one draft step (served on), then two different faults at one site: a padded count (served
    # on), then a count smaller than real (stopped)
    "warn": Scenario("draft_model", "warn", faults=("stale@2", "pad", "short")),
}


@dataclass
class Phase:
    """One fault injected into a serving server, and what followed."""

    fault: str
    log_start: int  # offset in the log where the phase began
    outputs: list[str] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    health: int | None = None  # /health status once requests failed (None: nothing answered)
    exit: int | None = None  # how the server ended by itself after a failed phase (None: still up)
    log: str = ""  # the log at the end of the phase (counter lines after it, when it served)
    metrics: str = ""  # /metrics at the end of a phase that served


@dataclass
class Run:
    scenario: Scenario
    server: Server
    outputs: list[str] = field(default_factory=list)
    batch_outputs: list[str] = field(default_factory=list)
    healthy_log: str = ""  # the log once every guarded process logged counters after the healthy requests
    healthy_metrics: str = ""  # /metrics then
    phases: list[Phase] = field(default_factory=list)
    stop_code: int | None = None
    log: str = ""  # everything, after the server is gone

    def phase(self, fault: str) -> Phase:
        return next(p for p in self.phases if p.fault == fault)

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
    # A cache of its own, empty, as on CI's first run and an operator's first serve: vLLM's model registry then
    # inspects each model class in a subprocess that loads the plugins, the guard too, and exits.
    extra = {
        FAULT_ENV: str(workdir / "fault"),
        "VLLM_DISABLE_COMPILE_CACHE": "1",
        "VLLM_CACHE_ROOT": str(workdir / "vllm-cache"),
    }
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
    (workdir / "fault").write_text("")  # healthy until a phase injects
    run = Run(scenario, start(scenario, python, models, workdir))
    try:
        run.server.start()
        run.outputs = run.server.complete(PROMPTS, MAX_TOKENS)
        run.batch_outputs = run.server.complete_concurrently(BATCH, MAX_TOKENS)
        run.healthy_log = wait_for_counters(run, len(run.server.log()))
        run.healthy_metrics = run.server.metrics()
        for fault in scenario.faults:
            phase = inject(run, workdir / "fault", fault)
            run.phases.append(phase)
            if phase.errors:
                break
    finally:
        run.stop_code = run.server.stop()
        run.log = run.server.log()
    return run


def inject(run: Run, trigger: Path, fault: str) -> Phase:
    """Serve a few requests with `fault` on (together, or one at a time). Where one fails, the engine is gone
    (raise mode, or an out-of-bounds build in warn mode): see how /health answers and wait for the server to
    end by itself. Where all are served, wait for the counter lines and scrape /metrics."""
    trigger.write_text(fault)
    phase = Phase(fault, len(run.server.log()))
    if run.scenario.concurrent_faults:
        with ThreadPoolExecutor(3) as pool:
            outcomes = list(pool.map(lambda p: _outcome(run.server, p), PROMPTS[:3]))
    else:
        outcomes = []
        for prompt in PROMPTS[:3]:
            outcomes.append(_outcome(run.server, prompt))
            if isinstance(outcomes[-1], BaseException):
                break
    phase.outputs = [o for o in outcomes if isinstance(o, str)]
    phase.errors = [o for o in outcomes if isinstance(o, BaseException)]
    if phase.errors:
        phase.health = run.server.health_status()
        phase.exit = run.server.wait_exit(FAULT_EXIT_WAIT_S)
        phase.log = run.server.log()
    else:
        # counter lines logged after the last answer: one logged while the requests ran can predate the faulty builds
        phase.log = wait_for_counters(run, len(run.server.log()))
        phase.metrics = run.server.metrics()
        trigger.write_text("")
    return phase


def _outcome(server: Server, prompt: str) -> str | BaseException:
    try:
        return server.complete([prompt], MAX_TOKENS)[0]
    except openai.APIError as exc:
        return exc


def metrics(text: str) -> dict[tuple[str, str], float]:
    """(name, labels) -> value of every specguard sample in a /metrics scrape."""
    return {(m["name"], m["labels"] or ""): float(m["value"]) for m in METRIC.finditer(text)}
