"""specguard's environment variables in vLLM's registry, so vLLM knows them.

vLLM warns about every `VLLM_*` variable missing from `vllm.envs.environment_variables`, and
`--fail-on-environ-validation` makes that a startup error (`validate_environ`, vllm/platforms/interface.py,
0.30.0+). Registering adds them to that dict. The same dict feeds `vllm.envs.compile_factors()`, the
torch.compile cache key ("Start with every known vLLM env var [...] hash everything else"): the guard runs
outside compiled graphs, so `compile_factors` is wrapped to leave specguard's variables out, and the key
stays what vLLM computes without specguard. Imports nothing heavy, and touches vLLM only when `vllm.envs` is
already loaded.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

ENV_VARS = ("VLLM_SPECGUARD", "VLLM_SPECGUARD_STATS_INTERVAL")
_MARK = "__specguard_env_filter__"


def _getter(name: str) -> Callable[[], str | None]:
    return lambda: os.environ.get(name)


def register_env_vars() -> bool:
    """Add ENV_VARS to vLLM's registry (idempotent); False when vllm.envs is not loaded or has no registry."""
    envs = sys.modules.get("vllm.envs")
    registry = getattr(envs, "environment_variables", None)
    if not isinstance(registry, dict):
        return False
    for name in ENV_VARS:
        registry.setdefault(name, _getter(name))
    factors = getattr(envs, "compile_factors", None)
    if callable(factors) and not getattr(factors, _MARK, False):
        envs.compile_factors = _without_ours(factors)
    return True


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
