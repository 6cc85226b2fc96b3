"""specguard's runtime guard: attention-metadata and FlashInfer launch invariants checked inside vLLM serving.

Loaded by vLLM in every process as the general plugin `specguard` (entry point group `vllm.general_plugins`).
With VLLM_SPECGUARD unset, empty, `0` or `off`, `register()` patches nothing and imports neither torch nor
vllm; `1`/`raise` raises SpecGuardViolation before a bad build or launch (vLLM then ends the engine); `warn`
logs each new kind of violation per site, counts every one, and lets it proceed unless it would touch memory
outside its buffers. See docs/runtime-guard.md, the operator's page."""

from __future__ import annotations

import os
import sys

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
    if ENV_VAR in os.environ and "vllm.envs" in sys.modules:
        # vLLM is loading us and the guard is configured (VLLM_SPECGUARD=0 included): make our variables known
        from specguard.runtime.vllm_env import register_env_vars

        register_env_vars()
    if mode == "off":
        return
    from specguard.runtime.reporting import STATS_ENV, parse_interval

    interval = parse_interval(os.environ.get(STATS_ENV))  # a bad value is a startup error too
    from specguard.runtime import install  # torch/vllm/flashinfer are imported only from here on

    install.install(mode, interval)


def stats() -> dict[str, object]:
    """Counters: violations, recorded disagreements, skips, guard-internal errors and checks run, keyed
    check:site[:reason]."""
    return POLICY.snapshot()


def reset_stats() -> None:
    POLICY.reset_counters()


def installed_checks() -> tuple[list[str], list[str]]:
    """(installed, skipped-with-reason) as logged by register(); empty when the guard is off."""
    install = sys.modules.get("specguard.runtime.install")
    if install is None:
        return [], []
    return list(install.STATE.installed), list(install.STATE.skipped)
