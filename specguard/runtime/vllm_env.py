"""specguard's environment variables in vLLM's registry, so vLLM knows them.

vLLM warns about every `VLLM_*` variable missing from `vllm.envs.environment_variables`, and
`--fail-on-environ-validation` makes that a startup error (`validate_environ`, vllm/platforms/interface.py,
0.30.0+). Registering adds them to that dict, each with a getter that is the standard library's own
`os.environ.get` (a `functools.partial`), so no specguard code runs when vLLM reads them. The same dict feeds
`vllm.envs.compile_factors()`, the torch.compile cache key ("Start with every known vLLM env var [...] hash
everything else"): while the guard is on (it runs outside compiled graphs), `compile_factors` is wrapped to
leave specguard's variables out, so the key stays what vLLM computes without specguard. With the guard off
nothing is wrapped. `unregister_env_vars()` takes both back. Imports nothing heavy, and touches vLLM only
when `vllm.envs` is already loaded.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

ENV_VARS = ("VLLM_SPECGUARD", "VLLM_SPECGUARD_STATS_INTERVAL")
_MARK = "__specguard_env_filter__"
_added: dict[str, Any] = {}  # name -> the getter this module put in the registry


def _envs() -> Any:
    return sys.modules.get("vllm.envs")


def register_env_vars() -> bool:
    """Add ENV_VARS to vLLM's registry (idempotent); False when vllm.envs is not loaded or has no registry."""
    registry = getattr(_envs(), "environment_variables", None)
    if not isinstance(registry, dict):
        return False
    for name in ENV_VARS:
        if name not in registry:
            registry[name] = _added[name] = functools.partial(os.environ.get, name)
    return True


def keep_out_of_compile_key() -> None:
    """While the guard is on: compile_factors() without specguard's variables."""
    envs = _envs()
    factors = getattr(envs, "compile_factors", None)
    if callable(factors) and not getattr(factors, _MARK, False):
        envs.compile_factors = _without_ours(factors)


def unregister_env_vars() -> None:
    """Take back what register_env_vars and keep_out_of_compile_key put into vllm.envs."""
    envs = _envs()
    registry = getattr(envs, "environment_variables", None)
    if isinstance(registry, dict):
        for name, getter in list(_added.items()):
            if registry.get(name) is getter:
                del registry[name]
    _added.clear()
    factors = getattr(envs, "compile_factors", None)
    if getattr(factors, _MARK, False):
        envs.compile_factors = factors.__wrapped__


def _without_ours(compile_factors: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(compile_factors)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        factors = compile_factors(*args, **kwargs)
        if isinstance(factors, dict):
            for name in ENV_VARS:
                factors.pop(name, None)
        return factors

    setattr(wrapper, _MARK, True)
    return wrapper
