"""specguard's runtime guard: attention-metadata and FlashInfer launch invariants checked inside vLLM and SGLang
serving.

Loaded by vLLM in every process as the general plugin `specguard` (entry point group `vllm.general_plugins`), and
by SGLang as the general plugin `specguard` (group `sglang.srt.plugins`, `register_sglang`, SGLANG_SPECGUARD with
the same values; SGLang applies the hooks it registers through its HookRegistry).
With VLLM_SPECGUARD unset, empty, `0` or `off`, `register()` patches nothing and imports neither torch nor
vllm; `1`/`raise` raises SpecGuardViolation before a bad build or launch (vLLM then ends the engine); `warn`
logs each new kind of violation per site, counts every one, and lets it proceed unless it would touch memory
outside its buffers. See docs/runtime-guard.md, the operator's page."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from specguard.runtime.errors import SpecGuardViolation, Violation
from specguard.runtime.policy import ENV_VAR, POLICY, SGLANG_ENV_VAR, SpecGuardConfigError, parse_mode

__all__ = [
    "ENV_VAR",
    "SpecGuardConfigError",
    "SpecGuardViolation",
    "Violation",
    "installed_checks",
    "register",
    "register_sglang",
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


def register_sglang() -> None:
    """SGLang general-plugin entry point (`sglang.srt.plugins`): the same guard, turned on by SGLANG_SPECGUARD.
    Hooks on SGLang's own methods are registered with SGLang's HookRegistry, which its plugin loader applies
    once every plugin has registered."""
    mode = _sglang_setting(lambda: parse_mode(os.environ.get(SGLANG_ENV_VAR), SGLANG_ENV_VAR))
    if mode is _INVALID or mode == "off":
        return
    from specguard.runtime.frameworks import SGLANG
    from specguard.runtime.reporting import parse_interval

    interval = _sglang_setting(lambda: parse_interval(os.environ.get(SGLANG.stats_env), SGLANG.stats_env))
    if interval is _INVALID:
        return
    from specguard.runtime import install

    install.install(mode, interval, SGLANG)


_INVALID = object()


def _sglang_setting(read: Callable[[], Any]) -> Any:
    """SGLang's plugin loader turns a plugin's exception into a logged traceback and goes on without it: a bad
    value is said in one error line instead, and the guard stays off."""
    try:
        return read()
    except SpecGuardConfigError as exc:
        from specguard.runtime.policy import get_logger

        get_logger().error("specguard runtime guard not installed: %s", exc)
        return _INVALID


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
