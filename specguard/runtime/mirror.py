"""A wrapper with the wrapped function's own parameter list, for the hottest guarded call site.

`def wrapper(*args, **kwargs)` makes every keyword call build a kwargs dict and unpack it again into the
original: for FlashInfer's MLA decode entry (33 parameters, 12-17 passed by keyword) that alone costs
about 1-1.5 us per launch. A wrapper whose parameters mirror the original's binds the caller's keywords
straight into its locals, hands the values the check needs to `before`, and passes everything on
positionally (keyword-only parameters by keyword). Defaults are the original's own objects, so the
original sees exactly the arguments it would have seen.

The wrapper's source is generated from `inspect.signature` and compiled with `exec`, the way `dataclasses`
builds `__init__`: only parameter names (checked to be identifiers) reach the source; every value
(defaults, the original, `before`) is passed in through the namespace, never rendered as text.
"""

from __future__ import annotations

import inspect
import keyword
from collections.abc import Callable, Mapping
from typing import Any

_P = inspect.Parameter
_PREFIX = "__sg_"  # names the generated code uses for itself; a parameter with this prefix is not mirrored


def mirror(
    original: Callable[..., Any],
    before: Callable[..., None],
    watched: Mapping[str, Any],
    required: tuple[str, ...] = (),
) -> Callable[..., Any] | None:
    """A function with `original`'s parameters that calls `before(*values of watched)` and then returns
    `original(...)` with every argument passed on. `watched` maps each name `before` takes, in order, to the
    value it gets when the signature lacks that parameter. None when the signature cannot be read, lacks a
    `required` name, or has a parameter this cannot mirror; the caller then uses a generic wrapper."""
    try:
        params = list(inspect.signature(original).parameters.values())
    except (TypeError, ValueError):
        return None
    names = {p.name for p in params}
    if not set(required) <= names or any(
        not p.name.isidentifier() or keyword.iskeyword(p.name) or p.name.startswith(_PREFIX) for p in params
    ):
        return None
    mirrored = {p.name for p in params if p.kind not in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD)}
    defaults = {p.name: p.default for p in params if p.default is not _P.empty}
    absent = {name: value for name, value in watched.items() if name not in mirrored}

    source_params, call_args = _parameter_lists(params)
    before_args = [name if name in mirrored else f"{_PREFIX}absent[{name!r}]" for name in watched]
    source = (
        f"def {_PREFIX}wrapper({', '.join(source_params)}):\n"
        f"    {_PREFIX}before({', '.join(before_args)})\n"
        f"    return {_PREFIX}original({', '.join(call_args)})\n"
    )
    namespace: dict[str, Any] = {
        f"{_PREFIX}original": original,
        f"{_PREFIX}before": before,
        f"{_PREFIX}defaults": defaults,
        f"{_PREFIX}absent": absent,
    }
    exec(compile(source, f"<specguard mirror of {getattr(original, '__qualname__', original)!s}>", "exec"), namespace)
    return namespace[f"{_PREFIX}wrapper"]


def _parameter_lists(params: list[inspect.Parameter]) -> tuple[list[str], list[str]]:
    """(the def's parameter list, the call's argument list) for `params`, in order."""
    source: list[str] = []
    call: list[str] = []
    starred = False  # a *args or bare * already separates the keyword-only parameters
    for i, p in enumerate(params):
        default = f"={_PREFIX}defaults[{p.name!r}]" if p.default is not _P.empty else ""
        if p.kind is _P.VAR_POSITIONAL:
            source.append(f"*{p.name}")
            call.append(f"*{p.name}")
            starred = True
        elif p.kind is _P.VAR_KEYWORD:
            source.append(f"**{p.name}")
            call.append(f"**{p.name}")
        elif p.kind is _P.KEYWORD_ONLY:
            if not starred:
                source.append("*")
                starred = True
            source.append(p.name + default)
            call.append(f"{p.name}={p.name}")
        else:
            source.append(p.name + default)
            call.append(p.name)
        nxt = params[i + 1] if i + 1 < len(params) else None
        if p.kind is _P.POSITIONAL_ONLY and (nxt is None or nxt.kind is not _P.POSITIONAL_ONLY):
            source.append("/")
    return source, call
