"""G3 at KV-cache group merge: wrap `merge` on vLLM's attention-spec classes (vllm.v1.kv_cache_interface)
and report a group whose specs disagree on a causality flag before vLLM merges it (with any(), in the
versions this guard targets, which silently turns a causal target group non-causal).
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
from typing import Any

from specguard.runtime import invariants as inv
from specguard.runtime.patching import Patcher, Skip, is_wrapped, mark, run_check
from specguard.runtime.policy import POLICY

MODULE = "vllm.v1.kv_cache_interface"
_depth = threading.local()  # subclass merges may call each other; only the outermost one checks
_flag_cache: dict[type, tuple[str, ...]] = {}


def causality_flags(spec_cls: type) -> tuple[str, ...]:
    """Boolean dataclass fields that say something about causality, e.g. non_causal_multi_token_decode."""
    flags = _flag_cache.get(spec_cls)
    if flags is None:
        flags = (
            tuple(
                f.name
                for f in dataclasses.fields(spec_cls)
                if "causal" in f.name and (f.type is bool or f.type == "bool")
            )
            if dataclasses.is_dataclass(spec_cls)
            else ()
        )
        _flag_cache[spec_cls] = flags
    return flags


def _check_merge(cls: type, specs: Any, site: str) -> inv.Violation | None:
    specs = list(specs)
    if len(specs) < 2:
        return None
    names: set[str] = set()
    for spec in specs:
        names.update(causality_flags(type(spec)))
    if not names:
        raise Skip(f"{cls.__name__} specs carry no causality flag")
    values = {name: [getattr(spec, name, None) for spec in specs] for name in sorted(names)}
    return inv.check_group_flags(values, site=site, subject=f"KV-cache group of {len(specs)} {cls.__name__}")


def make_merge(func: Any, cls_name: str) -> classmethod:
    site = f"{cls_name}.merge"
    counter = POLICY.site("G3", site)

    def merge(cls: type, specs: Any, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(_depth, "n", 0)
        if depth == 0:
            run_check(counter, _check_merge, cls, specs, site)
        _depth.n = depth + 1
        try:
            return func(cls, specs, *args, **kwargs)
        finally:
            _depth.n = depth

    return classmethod(mark(merge, func))


def install(patcher: Patcher, installed: list[str], skipped: list[str]) -> None:
    mod = importlib.import_module(MODULE)
    base = getattr(mod, "AttentionSpec", None)
    if base is None:
        skipped.append(f"G3@merge (no AttentionSpec in {MODULE})")
        return
    wrapped = []
    for name, obj in sorted(vars(mod).items()):
        if not (isinstance(obj, type) and issubclass(obj, base) and obj.__module__ == MODULE):
            continue
        raw = obj.__dict__.get("merge")
        if not isinstance(raw, classmethod) or not causality_flags(obj):
            continue
        if not is_wrapped(raw):
            patcher.replace(obj, "merge", make_merge(raw.__func__, name))
        wrapped.append(name)
    if wrapped:
        installed.append("G3@" + "/".join(f"{n}.merge" for n in wrapped))
    else:
        skipped.append(f"G3@merge (no attention spec in {MODULE} merges a causality flag)")
