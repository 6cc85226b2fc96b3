"""Name- and mode-keyed registries filled by decorators at import time."""

from __future__ import annotations

from typing import Any, Callable, Dict, Generic, Hashable, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: Dict[Hashable, T] = {}

    def register(self, key: Hashable) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            if key in self._entries:
                raise KeyError(f"{self.kind} {key!r} registered twice")
            self._entries[key] = obj
            return obj

        return decorator

    def get(self, key: Hashable) -> T:
        try:
            return self._entries[key]
        except KeyError:
            raise KeyError(f"unknown {self.kind} {key!r}") from None

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def items(self):
        return self._entries.items()


DRAFT_STRATEGIES: Registry[Any] = Registry("draft strategy")
MODE_HANDLERS: Registry[Any] = Registry("forward-mode handler")
DCP_BACKENDS: Registry[Any] = Registry("dcp backend")


def register_draft_strategy(name: str):
    return DRAFT_STRATEGIES.register(name)


def register_mode_handler(mode):
    return MODE_HANDLERS.register(mode)


def register_dcp_backend(name: str):
    return DCP_BACKENDS.register(name)
