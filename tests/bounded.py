"""A child process bounded in memory (RLIMIT_AS) and CPU time (RLIMIT_CPU): a run that would fill the machine or
spin dies there and the test sees it; nothing is timed."""

from __future__ import annotations

import resource
from collections.abc import Callable


def limits(memory: int, cpu_seconds: int) -> Callable[[], None]:
    """A `preexec_fn` that sets both limits in the child."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))

    return apply
