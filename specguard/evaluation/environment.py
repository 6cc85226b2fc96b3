"""The environment the evaluated code will run in, as the evaluator reads it: `os.getenv(...)` and `os.environ`
(`.get`, `in`, `[...]`) in evaluated code look the name up here, never in specguard's own process. Every read is
remembered, and so is every variable whose value decided a branch of evaluated code (an `if`, an `assert`, a
conditional expression testing it, directly or through a local computed from it), so a verdict that took a code
path because a variable was unset can say so, and one that merely read a variable does not.

A client sets it for a run (`specguard config`: its own environment plus `--env KEY=VALUE`, a deployment
elsewhere); evaluations outside such a context see an empty environment (every variable unset), and still record
what they read.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass
class ServedEnvironment:
    values: Mapping[str, str]
    # every name read, in order (a name read by several evaluations appears once per read)
    log: list[str] = field(default_factory=list)
    # every name whose value decided a branch, in order
    decided: list[str] = field(default_factory=list)

    def get(self, name: str) -> str | None:
        self.log.append(name)
        return self.values.get(name)

    def environ(self) -> ServedEnviron:
        """`os.environ` as the evaluated code sees it."""
        return ServedEnviron(self)

    def decide(self, names: Iterable[str]) -> None:
        self.decided.extend(names)

    def decided_unset(self, start: int = 0) -> list[str]:
        """The variables, unset here, that decided a branch since `start` (a position in `decided`), once each."""
        return [name for name in dict.fromkeys(self.decided[start:]) if self.values.get(name) is None]


class ServedEnviron(dict[str, str]):
    """`os.environ` of the serving environment: a mapping of its values in which every variable looked up (`in`,
    `[...]`, `.get`) is a read, as `os.getenv` is."""

    def __init__(self, env: ServedEnvironment) -> None:
        super().__init__(env.values)
        self._env = env

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._env.get(name) is not None

    def __getitem__(self, name: str) -> str:
        value = self._env.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        value = self._env.get(name)
        return default if value is None else value


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


@contextlib.contextmanager
def ensured() -> Iterator[ServedEnvironment]:
    """The serving environment set by the caller, or else an empty one for the duration (every variable unset)."""
    found = _CURRENT.get()
    if found is not None:
        yield found
        return
    with served_environment({}) as env:
        yield env


def memoized(memo: dict[Any, Any], key: Any, compute: Callable[[], T]) -> T:
    """`compute()` once per key and serving environment: a result is reused while every variable its computation
    read has the value it had then, and reusing it counts its reads and decisions again (for the verdict that
    reuses it)."""
    env = current()
    found = memo.get(key)
    if found is not None:
        result, reads, decided = found
        if all(env.values.get(name) == value for name, value in reads.items()):
            env.log.extend(reads)
            env.decide(decided)
            return result
    reads_at, decided_at = len(env.log), len(env.decided)
    result = compute()
    reads = {name: env.values.get(name) for name in env.log[reads_at:]}
    memo[key] = (result, reads, env.decided[decided_at:])
    return result
