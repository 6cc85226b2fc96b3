"""specguard's runtime guard: FlashInfer launch invariants asserted inside vLLM serving.

Loaded by vLLM in every process as the general plugin `specguard` (entry point group
`vllm.general_plugins`). With VLLM_SPECGUARD unset, empty, `0` or `off`, `register()` patches nothing
and imports neither torch nor vllm; `1`/`raise` raises SpecGuardViolation before a bad launch; `warn`
logs once per check and site, counts, and lets the launch proceed. See the README, "Runtime guard".
"""

from __future__ import annotations

import os

from specguard.runtime.errors import SpecGuardViolation, Violation
from specguard.runtime.policy import ENV_VAR, POLICY, SpecGuardConfigError, parse_mode

__all__ = [
    "ENV_VAR",
    "SpecGuardConfigError",
    "SpecGuardViolation",
    "Violation",
    "installed_checks",
    "register",
    "reset_stats",
    "stats",
]


def register() -> None:
    """vLLM general-plugin entry point; safe to call any number of times in a process."""
    mode = parse_mode(os.environ.get(ENV_VAR))  # an unknown value is a startup error
    if mode == "off":
        return
    from specguard.runtime import install  # torch/vllm/flashinfer are imported only from here on

    install.install(mode)


def stats() -> dict[str, object]:
    """Counters: violations, skips, guard-internal errors and checks run, keyed check:site[:reason]."""
    return POLICY.snapshot()


def reset_stats() -> None:
    POLICY.reset_counters()


def installed_checks() -> tuple[list[str], list[str]]:
    """(installed, skipped-with-reason) as logged by register(); empty when the guard is off."""
    import sys

    install = sys.modules.get("specguard.runtime.install")
    if install is None:
        return [], []
    return list(install.STATE.installed), list(install.STATE.skipped)
