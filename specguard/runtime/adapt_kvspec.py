"""G3 at KV-cache group merge: wrap `merge` on vLLM's attention-spec classes (vllm.v1.kv_cache_interface)
and record a group whose specs disagree on the non-causal decode flag. Recorded, never raised: vLLM decides
how to group layers (it tries merges and catches AssertionError/ValueError to mean "do not merge", in
`is_kv_cache_spec_uniform` and the bucket merge of kv_cache_planning.py), and that decision must not depend
on the guard. A mixed group is not wrong by itself: vLLM unions the flag on purpose ("Group capability
enabled when any member flattens a non-causal query block into decode rows. Runtime metadata still selects
causal vs. non-causal mode", MLAAttentionSpec, vLLM 0.30.0+). What would be wrong is a launch that hands
non-causal metadata to a causal layer, and G3 at `forward_mqa` stops that one.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
from typing import Any

from specguard.runtime import invariants as inv
from specguard.runtime.patching import Patcher, Skip, is_wrapped, mark, run_record
from specguard.runtime.policy import POLICY

MODULE = "vllm.v1.kv_cache_interface"
# The flags G3 compares. Only the one that decides how a layer's decode query is launched:
# `FullAttentionSpec.non_causal` (Prefix-LM layers) is a scheduling hint that vLLM merges with any() on
# purpose ("If any layer in the group is non-causal, treat the group as non-causal so the engine core
# disables incompatible scheduling"; "It does not affect the KV cache layout itself").
FLAGS = ("non_causal_multi_token_decode",)
_depth = threading.local()  # subclass merges may call each other; only the outermost one checks


def causality_flags(spec_cls: type) -> tuple[str, ...]:
    """The FLAGS `spec_cls` declares as dataclass fields."""
    if not dataclasses.is_dataclass(spec_cls):
        return ()
    names = {f.name for f in dataclasses.fields(spec_cls)}
    return tuple(flag for flag in FLAGS if flag in names)


def _check_merge(cls: type, specs: Any, site: str) -> inv.Violation | None:
    if not isinstance(specs, (list, tuple)):
        # reading a one-shot iterable would use up what vLLM's merge then reads
        raise Skip(f"{cls.__name__}.merge called with a {type(specs).__name__}, not a list")
    if len(specs) < 2:
        return None
    names: set[str] = set()
    for spec in specs:
        names.update(causality_flags(type(spec)))
    if not names:
        raise Skip(f"{cls.__name__} specs carry no non-causal decode flag")
    values = {name: [getattr(spec, name, None) for spec in specs] for name in sorted(names)}
    return inv.check_group_flags(values, site=site, subject=f"KV-cache group of {len(specs)} {cls.__name__}")


def make_merge(func: Any, cls_name: str) -> classmethod:
    site = f"{cls_name}.merge"
    counter = POLICY.site("G3", site)

    def merge(cls: type, specs: Any, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(_depth, "n", 0)
        if depth == 0:
            run_record(counter, _check_merge, cls, specs, site)
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
        installed.append("G3@" + "/".join(f"{n}.merge" for n in wrapped) + " (recorded, never raised)")
    else:
        skipped.append(f"G3@merge (no attention spec in {MODULE} merges {' or '.join(FLAGS)})")
