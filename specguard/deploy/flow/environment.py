"""The environment the served vLLM will run in, as the evaluator reads it: `os.getenv(...)` and `os.environ.get(...)`
in evaluated code look the name up here, and every read is remembered, so a verdict that took a code path because a
variable (VLLM_USE_V2_MODEL_RUNNER, ...) was unset can say so.

`specguard config` sets it from its own environment plus `--env KEY=VALUE` (a deployment elsewhere); evaluations
outside such a context see an empty environment (every variable unset), and still record what they read.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field


@dataclass
class ServedEnvironment:
    values: Mapping[str, str]
    # every name read, in order (a name read by several evaluations appears once per read)
    log: list[str] = field(default_factory=list)

    def get(self, name: str) -> str | None:
        self.log.append(name)
        return self.values.get(name)


_CURRENT: contextvars.ContextVar[ServedEnvironment | None] = contextvars.ContextVar("specguard_env", default=None)


@contextlib.contextmanager
def served_environment(values: Mapping[str, str]) -> Iterator[ServedEnvironment]:
    env = ServedEnvironment(dict(values))
    token = _CURRENT.set(env)
    try:
        yield env
    finally:
        _CURRENT.reset(token)


def current() -> ServedEnvironment:
    return _CURRENT.get() or ServedEnvironment({})
