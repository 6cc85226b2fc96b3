"""Launcher registry: MLA decode launchers register themselves by name."""

from __future__ import annotations

from typing import Callable, Dict

MLA_LAUNCHERS: Dict[str, Callable] = {}


def register_mla_launcher(name: str):
    def decorator(fn: Callable) -> Callable:
        if name in MLA_LAUNCHERS:
            raise KeyError(f"duplicate MLA launcher {name!r}")
        MLA_LAUNCHERS[name] = fn
        return fn

    return decorator


def get_mla_launcher(name: str) -> Callable:
    try:
        return MLA_LAUNCHERS[name]
    except KeyError:
        raise KeyError(
            f"unknown MLA launcher {name!r}; known: {sorted(MLA_LAUNCHERS)}"
        ) from None
