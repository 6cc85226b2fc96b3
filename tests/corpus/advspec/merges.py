"""Adversarial corpus, SG201: KV-cache spec merges whose per-layer causality flag is combined (a bug: a group whose
layers disagree still merges), and merges that fail for disagreement however the agreement check is written."""

from __future__ import annotations

import copy
import functools
import operator
from dataclasses import dataclass, fields, replace


def _require_one(values: set, name: str):
    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py FullAttentionSpec.merge_window_sizes (a helper that
    #        returns the one value or raises)
    if len(values) == 0:
        return None
    if len(values) == 1:
        return values.pop()
    raise ValueError(f"All attention layers in the same KV cache group must have the same {name}.")


def _same(values) -> bool:
    first, *rest = values
    return all(value == first for value in rest)


@dataclass(frozen=True, kw_only=True)
class AnyMergeSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py (0.28.0) MLAAttentionSpec.merge
    #        (`non_causal_multi_token_decode=any(spec.non_causal_multi_token_decode for spec in specs)`)
    # expect: SG201
    @classmethod
    def merge(cls, specs):
        return cls(
            block_size=specs[0].block_size,
            non_causal_multi_token_decode=any(spec.non_causal_multi_token_decode for spec in specs),
        )


@dataclass(frozen=True, kw_only=True)
class MaxMergeSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: the same merge with max() over the flags
    # expect: SG201
    @classmethod
    def merge(cls, specs):
        flag = max(spec.non_causal_multi_token_decode for spec in specs)
        return cls(block_size=specs[0].block_size, non_causal_multi_token_decode=flag)


@dataclass(frozen=True, kw_only=True)
class CountMergeSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: the flag as "some layer sets it", counted
    # expect: SG201
    @classmethod
    def merge(cls, specs):
        non_causal = sum(int(spec.non_causal_multi_token_decode) for spec in specs) > 0
        return cls(block_size=specs[0].block_size, non_causal_multi_token_decode=non_causal)


@dataclass(frozen=True, kw_only=True)
class NotAllMergeSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: the flag as "not every layer is causal"
    # expect: SG201
    @classmethod
    def merge(cls, specs):
        causal = all(not spec.non_causal_multi_token_decode for spec in specs)
        return cls(block_size=specs[0].block_size, non_causal_multi_token_decode=not causal)


@dataclass(frozen=True, kw_only=True)
class ContainsMergeSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: `True in [...]` over the flags
    # expect: SG201
    @classmethod
    def merge(cls, specs):
        flags = [spec.non_causal_multi_token_decode for spec in specs]
        return cls(block_size=specs[0].block_size, non_causal_multi_token_decode=True in flags)


@dataclass(frozen=True, kw_only=True)
class ReduceMergeSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: functools.reduce(operator.or_, ...) over the flags
    # expect: SG201
    @classmethod
    def merge(cls, specs):
        flag = functools.reduce(operator.or_, (spec.non_causal_multi_token_decode for spec in specs), False)
        return cls(block_size=specs[0].block_size, non_causal_multi_token_decode=flag)


@dataclass(frozen=True, kw_only=True)
class LoopMergeSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge (`for spec in specs: ...`
    #        after the merge), the flag folded in the loop
    # expect: SG201
    @classmethod
    def merge(cls, specs):
        non_causal = False
        for spec in specs:
            if spec.non_causal_multi_token_decode:
                non_causal = True
        return cls(block_size=specs[0].block_size, non_causal_multi_token_decode=non_causal)


@dataclass(frozen=True, kw_only=True)
class SetattrMergeSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py (`object.__setattr__(spec, "page_size_padded", ...)`
    #        on a frozen spec), used to promote the flag after the merge
    # expect: SG201
    @classmethod
    def merge(cls, specs):
        merged = copy.deepcopy(specs[0])
        if any(spec.non_causal_multi_token_decode for spec in specs):
            object.__setattr__(merged, "non_causal_multi_token_decode", True)
        return merged


@dataclass(frozen=True, kw_only=True)
class FirstWinsSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py KVCacheSpec.merge (`return copy.deepcopy(specs[0])`),
    #        checked on the block size only: the first layer's flag stands for the group
    # expect: SG201
    @classmethod
    def merge(cls, specs):
        if not all(spec.block_size == specs[0].block_size for spec in specs[1:]):
            raise AssertionError("All layers in the same KV cache group must have the same block size.")
        return copy.deepcopy(specs[0])


@dataclass(frozen=True, kw_only=True)
class ReplaceMergeSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py (`replace(self, block_size=block_size)`), the union
    #        written into a copy of the first spec
    # expect: SG201
    @classmethod
    def merge(cls, specs):
        flags = {spec.non_causal_multi_token_decode for spec in specs}
        return replace(specs[0], non_causal_multi_token_decode=True in flags)


@dataclass(frozen=True, kw_only=True)
class DroppedFlagSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py FullAttentionSpec.merge (a merge that names every field
    #        it keeps), with the flag left to its default
    # expect: SG201
    @classmethod
    def merge(cls, specs):
        assert len({spec.block_size for spec in specs}) == 1
        return cls(block_size=specs[0].block_size)


@dataclass(frozen=True, kw_only=True)
class KwargsMergeSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: merged fields gathered in a dict and unpacked into the constructor
    # expect: SG201
    @classmethod
    def merge(cls, specs):
        merged = {"block_size": specs[0].block_size}
        merged["non_causal_multi_token_decode"] = any(s.non_causal_multi_token_decode for s in specs)
        return cls(**merged)


# ---- correct merges --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AssertSetSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py (0.29.0) MLAAttentionSpec.merge
    #        (`assert len(non_causal_mtd_set) == 1`, then `non_causal_mtd_set.pop()`)
    # expect: clean
    @classmethod
    def merge(cls, specs):
        non_causal_mtd_set = {spec.non_causal_multi_token_decode for spec in specs}
        assert len(non_causal_mtd_set) == 1, (
            "All layers of a KV cache group must agree on non_causal_multi_token_decode."
        )
        return cls(block_size=specs[0].block_size, non_causal_multi_token_decode=non_causal_mtd_set.pop())


@dataclass(frozen=True, kw_only=True)
class RaiseLoopSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge (the `for spec in specs: ...
    #        assert getattr(spec, f.name) == getattr(merged_spec, f.name)` check), for the flag, raising
    # expect: clean
    @classmethod
    def merge(cls, specs):
        first = specs[0].non_causal_multi_token_decode
        for spec in specs[1:]:
            if spec.non_causal_multi_token_decode != first:
                raise ValueError("layers of one KV cache group must agree on causality")
        return cls(block_size=specs[0].block_size, non_causal_multi_token_decode=first)


@dataclass(frozen=True, kw_only=True)
class EqualSpecsSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py KVCacheSpec.merge
    #        (`if not all(spec == specs[0] for spec in specs[1:]): raise AssertionError(...)`): dataclass equality
    # expect: clean
    @classmethod
    def merge(cls, specs):
        if not all(spec == specs[0] for spec in specs[1:]):
            raise AssertionError("All layers in the same KV cache group must be the same.")
        return copy.deepcopy(specs[0])


@dataclass(frozen=True, kw_only=True)
class HelperFunctionSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py FullAttentionSpec.merge_window_sizes, as a module helper
    # expect: clean
    @classmethod
    def merge(cls, specs):
        flag = _require_one({spec.non_causal_multi_token_decode for spec in specs}, "non_causal_multi_token_decode")
        return cls(block_size=specs[0].block_size, non_causal_multi_token_decode=flag)


@dataclass(frozen=True, kw_only=True)
class HelperMethodSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    @classmethod
    def merge_flags(cls, flags: set[bool]) -> bool:
        if len(flags) != 1:
            raise ValueError(f"{cls.__name__}: layers disagree on non_causal_multi_token_decode: {sorted(flags)}")
        return next(iter(flags))

    # idiom: the same check as a classmethod of the spec (FullAttentionSpec.merge_window_sizes is one)
    # expect: clean
    @classmethod
    def merge(cls, specs):
        return cls(
            block_size=specs[0].block_size,
            non_causal_multi_token_decode=cls.merge_flags({s.non_causal_multi_token_decode for s in specs}),
        )


@dataclass(frozen=True, kw_only=True)
class AllEqualFirstSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py FullAttentionSpec.merge (`assert all(isinstance(spec,
    #        FullAttentionSpec) for spec in specs)`), written for the flag
    # expect: clean
    @classmethod
    def merge(cls, specs):
        assert all(s.non_causal_multi_token_decode == specs[0].non_causal_multi_token_decode for s in specs), (
            "causal and non-causal layers cannot share a KV cache group"
        )
        return cls(
            block_size=specs[0].block_size,
            non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs),
        )


@dataclass(frozen=True, kw_only=True)
class LenCheckSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: the agreement as "more than one distinct value raises"
    # expect: clean
    @classmethod
    def merge(cls, specs):
        flags = set(spec.non_causal_multi_token_decode for spec in specs)
        if len(flags) > 1:
            raise ValueError(f"mixed causality in one KV cache group: {flags}")
        (flag,) = flags
        return cls(block_size=specs[0].block_size, non_causal_multi_token_decode=flag)


@dataclass(frozen=True, kw_only=True)
class UnpackedCheckSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: a first/rest comparison in a module helper returning a bool, asserted
    # expect: clean
    @classmethod
    def merge(cls, specs):
        flags = [spec.non_causal_multi_token_decode for spec in specs]
        assert _same(flags), "layers of one KV cache group must agree on non_causal_multi_token_decode"
        return cls(block_size=specs[0].block_size, non_causal_multi_token_decode=flags[0])


@dataclass(frozen=True, kw_only=True)
class FieldsLoopSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge (`for f in fields(...): assert
    #        getattr(spec, f.name) == getattr(merged_spec, f.name)`), over this class's own fields
    # expect: clean
    @classmethod
    def merge(cls, specs):
        merged_spec = cls(
            block_size=specs[0].block_size,
            non_causal_multi_token_decode=any(spec.non_causal_multi_token_decode for spec in specs),
        )
        for spec in specs:
            for f in fields(cls):
                assert getattr(spec, f.name) == getattr(merged_spec, f.name), (
                    "All attention layers in the same KV cache group must have the same attention spec."
                )
        return merged_spec


@dataclass(frozen=True, kw_only=True)
class CountCheckSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: the agreement as "all or none", counted
    # expect: clean
    @classmethod
    def merge(cls, specs):
        count = sum(1 for spec in specs if spec.non_causal_multi_token_decode)
        if count not in (0, len(specs)):
            raise AssertionError("a KV cache group mixes causal and non-causal layers")
        return cls(block_size=specs[0].block_size, non_causal_multi_token_decode=count > 0)


@dataclass(frozen=True, kw_only=True)
class ReduceCheckedSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

    # idiom: functools.reduce(operator.or_, ...) after an agreement check written as `not in`/`len`
    # expect: clean
    @classmethod
    def merge(cls, specs):
        flags = [spec.non_causal_multi_token_decode for spec in specs]
        if len(set(flags)) != 1:
            raise ValueError("layers of one KV cache group disagree on non_causal_multi_token_decode")
        return cls(block_size=specs[0].block_size, non_causal_multi_token_decode=functools.reduce(operator.or_, flags))
