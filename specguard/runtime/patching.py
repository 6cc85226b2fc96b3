"""Installing and removing wrappers, and running a check so that only a real violation escapes.

Every wrapper calls `run_check` (or `run_record`): a `Skip` is counted and logged once, any other exception
from the guard's own code is counted and logged once (the launch proceeds), and only `SpecGuardViolation`
reaches vLLM.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specguard.runtime.errors import SpecGuardViolation, Violation
from specguard.runtime.policy import POLICY, Site

ORIGINAL_ATTR = "__specguard_original__"
_P = inspect.Parameter


class Skip(Exception):
    """The check cannot run here without a device read or a missing input; not a violation."""


def run_check(site: Site, fn: Callable[..., Violation | None], *args: Any) -> None:
    """Run a check before a launch: a violation is raised (raise mode) or logged once and counted (warn)."""
    violation = _checked(site, fn, args)
    if violation is not None:
        POLICY.report(violation)


def run_record(site: Site, fn: Callable[..., Violation | None], *args: Any) -> None:
    """Run a check whose finding must never change what vLLM decides: a disagreement is counted and logged
    once, never raised (the launch it could lead to has its own check)."""
    violation = _checked(site, fn, args)
    if violation is not None:
        POLICY.record(violation)


def _checked(site: Site, fn: Callable[..., Violation | None], args: tuple) -> Violation | None:
    next(site.counter)
    try:
        return fn(*args)
    except SpecGuardViolation:
        raise
    except Skip as skip:
        POLICY.skip(site.check, site.name, str(skip))
    except Exception as exc:  # noqa: BLE001 -- a bug in the guard must never stop a launch
        POLICY.guard_error(site.check, site.name, exc)
    return None


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


def subclasses(cls: type) -> list[type]:
    """Every class below `cls`, each once."""
    seen: list[type] = []
    stack = [cls]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub not in seen:
                seen.append(sub)
                stack.append(sub)
    return seen


def raw_attr(owner: Any, name: str) -> Any:
    """What `owner` itself holds under `name`: a class's own __dict__ entry (a classmethod or
    staticmethod descriptor stays one; ABSENT when the class only inherits it), a module's attribute."""
    return owner.__dict__.get(name, ABSENT) if isinstance(owner, type) else getattr(owner, name)


def arg_binder(
    func: Callable[..., Any],
    name: str,
    default: Any = None,
    *,
    bound_self: bool = True,
    star_args_names: tuple[str, ...] = (),
) -> Callable[[tuple, dict], Any]:
    """A function `(args, kwargs) -> value` that finds the argument `name` of a call to `func` the way Python
    binds it, positional or keyword (`args` without self when `bound_self`); `default` (or the parameter's
    own default) when it is absent. `star_args_names` names, in order, what a `*args` parameter stands for
    where the callee maps it itself (FlashInfer's deprecated positional plan() arguments)."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        params = []
    if bound_self and params:
        params = params[1:]
    positional = [p.name for p in params if p.kind in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)]
    index: int | None = None
    if name in positional:
        index = positional.index(name)
    elif name in star_args_names and any(p.kind is _P.VAR_POSITIONAL for p in params):
        index = len(positional) + star_args_names.index(name)
    param = next((p for p in params if p.name == name), None)
    if param is not None and param.default is not _P.empty:
        default = param.default

    def get(args: tuple, kwargs: dict) -> Any:
        if index is not None and len(args) > index:
            return args[index]
        return kwargs.get(name, default)

    return get


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


ABSENT = _Absent()  # what a class held under a name it only inherited: restore deletes the override


@dataclass
class Patch:
    owner: Any
    name: str
    raw_original: Any  # exactly what owner.__dict__ held (keeps classmethod/staticmethod descriptors), or ABSENT


class Patcher:
    """Records every attribute it replaces so `restore()` can put the originals back (tests, uninstall)."""

    def __init__(self) -> None:
        self.patches: list[Patch] = []
        self._cleanups: list[Callable[[], None]] = []

    def at_restore(self, cleanup: Callable[[], None]) -> None:
        """Run `cleanup` on restore (state a guard registered that is not an attribute, e.g. an observer)."""
        self._cleanups.append(cleanup)

    def replace(self, owner: Any, name: str, new: Any) -> None:
        raw = raw_attr(owner, name)
        if is_wrapped(raw):
            return  # idempotent: already guarded
        setattr(owner, name, new)
        self.patches.append(Patch(owner, name, raw))

    def rebind_everywhere(
        self, defining_module: Any, name: str, new: Any, prefix: str | tuple[str, ...] = "vllm."
    ) -> int:
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
        for cleanup in reversed(self._cleanups):
            cleanup()
        self._cleanups.clear()
        for patch in reversed(self.patches):
            if patch.raw_original is ABSENT:
                delattr(patch.owner, patch.name)
            else:
                setattr(patch.owner, patch.name, patch.raw_original)
        self.patches.clear()
