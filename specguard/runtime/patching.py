"""Installing and removing wrappers, and running a check so that only a real violation escapes.

Every wrapper calls `run_check`: a `Skip` is counted and logged once, any other exception from the guard's
own code is counted and logged once (the launch proceeds), and only `SpecGuardViolation` reaches vLLM.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specguard.runtime.errors import SpecGuardViolation, Violation
from specguard.runtime.policy import POLICY, Site

ORIGINAL_ATTR = "__specguard_original__"


class Skip(Exception):
    """The check cannot run here without a device read or a missing input; not a violation."""


def run_check(site: Site, fn: Callable[..., Violation | None], *args: Any) -> None:
    site.runs += 1
    try:
        violation = fn(*args)
    except SpecGuardViolation:
        raise
    except Skip as skip:
        POLICY.skip(site.check, site.name, str(skip))
        return
    except Exception as exc:  # noqa: BLE001 -- a bug in the guard must never stop a launch
        POLICY.guard_error(site.check, site.name, exc)
        return
    if violation is not None:
        POLICY.report(violation)


def guard_call(check: str, site: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Run guard bookkeeping code (not a check) and swallow its failures into the counters."""
    try:
        return fn(*args)
    except Skip as skip:
        POLICY.skip(check, site, str(skip))
    except Exception as exc:  # noqa: BLE001
        POLICY.guard_error(check, site, exc)
    return None


def original_of(obj: Any) -> Any:
    """The object a specguard wrapper stands in for (obj itself when it is not a wrapper)."""
    func = getattr(obj, "__func__", obj)
    return getattr(func, ORIGINAL_ATTR, obj)


def is_wrapped(obj: Any) -> bool:
    return hasattr(getattr(obj, "__func__", obj), ORIGINAL_ATTR)


def mark(wrapper: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    functools.update_wrapper(wrapper, original)
    setattr(wrapper, ORIGINAL_ATTR, original)
    return wrapper


def raw_attr(owner: Any, name: str) -> Any:
    """What `owner` itself holds under `name`: a class's own __dict__ entry (a classmethod or
    staticmethod descriptor stays one), a module's attribute."""
    return owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)


@dataclass
class Patch:
    owner: Any
    name: str
    raw_original: Any  # exactly what owner.__dict__ held (keeps classmethod/staticmethod descriptors)


class Patcher:
    """Records every attribute it replaces so `restore()` can put the originals back (tests, uninstall)."""

    def __init__(self) -> None:
        self.patches: list[Patch] = []

    def replace(self, owner: Any, name: str, new: Any) -> None:
        raw = raw_attr(owner, name)
        if is_wrapped(raw):
            return  # idempotent: already guarded
        setattr(owner, name, new)
        self.patches.append(Patch(owner, name, raw))

    def rebind_everywhere(self, defining_module: Any, name: str, new: Any, prefix: str = "vllm.") -> int:
        """Replace a function in its module and in every loaded module that imported it by name, so both
        already-imported and later-imported callers reach the wrapper."""
        original = getattr(defining_module, name)
        count = 0
        for mod_name, mod in list(sys.modules.items()):
            if mod is None or not mod_name.startswith(prefix):
                continue
            if mod.__dict__.get(name) is original:
                self.replace(mod, name, new)
                count += 1
        return count

    def restore(self) -> None:
        for patch in reversed(self.patches):
            setattr(patch.owner, patch.name, patch.raw_original)
        self.patches.clear()
