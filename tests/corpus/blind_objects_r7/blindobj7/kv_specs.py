# SPDX-License-Identifier: Apache-2.0
"""MLA KV-cache specs of the fork's draft and target layers."""

import copy
import functools
from collections import Counter
from dataclasses import dataclass, fields, replace
from typing import Self

from vllm.v1.kv_cache_interface import AttentionSpec, MLAAttentionSpec

from ._spec_utils import check_uniform_mla_fields, merged_mla_fields


@dataclass(frozen=True, kw_only=True)
class AnyMergeMLASpec(MLAAttentionSpec):
    """MLA layers of DSpark-style drafters, which decode a query block."""

    draft_block_size: int = 1

    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge; merged kwargs built in a dict, flag set with any() before cls(**kwargs)
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        kwargs = merged_mla_fields(specs)
        kwargs["non_causal_multi_token_decode"] = any(
            spec.non_causal_multi_token_decode for spec in specs
        )
        kwargs["draft_block_size"] = max(spec.draft_block_size for spec in specs)
        return cls(**kwargs)


@dataclass(frozen=True, kw_only=True)
class MaxMergeMLASpec(MLAAttentionSpec):
    draft_block_size: int = 1

    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge; flag merged with max() alongside the block size
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        return cls(
            **merged_mla_fields(specs),
            non_causal_multi_token_decode=max(
                spec.non_causal_multi_token_decode for spec in specs
            ),
            draft_block_size=max(spec.draft_block_size for spec in specs),
        )


@dataclass(frozen=True, kw_only=True)
class ReduceMergeMLASpec(MLAAttentionSpec):
    draft_block_size: int = 1

    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge; functools.reduce with a lambda over the specs
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        non_causal = functools.reduce(
            lambda acc, spec: acc or spec.non_causal_multi_token_decode, specs, False
        )
        block = functools.reduce(
            lambda acc, spec: max(acc, spec.draft_block_size), specs, 1
        )
        return cls(
            **merged_mla_fields(specs),
            non_causal_multi_token_decode=non_causal,
            draft_block_size=block,
        )


@dataclass(frozen=True, kw_only=True)
class PatchedMergeMLASpec(MLAAttentionSpec):
    draft_block_size: int = 1

    # idiom: vllm/v1/kv_cache_interface.py _apply_alignment_padding (object.__setattr__ on a frozen spec) inside merge; `True in` generator
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        merged = cls(
            **merged_mla_fields(specs),
            draft_block_size=max(spec.draft_block_size for spec in specs),
        )
        if True in (spec.non_causal_multi_token_decode for spec in specs):
            object.__setattr__(merged, "non_causal_multi_token_decode", True)
        return merged


@dataclass(frozen=True, kw_only=True)
class LoopMergeMLASpec(MLAAttentionSpec):
    draft_block_size: int = 1

    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge; explicit loop accumulating the flag with |=
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        non_causal = False
        block = 1
        for spec in specs:
            non_causal |= spec.non_causal_multi_token_decode
            block = max(block, spec.draft_block_size)
        return cls(
            **merged_mla_fields(specs),
            non_causal_multi_token_decode=non_causal,
            draft_block_size=block,
        )


@dataclass(frozen=True, kw_only=True)
class FirstLayerMLASpec(MLAAttentionSpec):
    draft_block_size: int = 1

    # idiom: vllm/v1/kv_cache_interface.py FullAttentionSpec.merge (fields(AttentionSpec) check); dataclasses.replace on the first layer's spec
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        check_uniform_mla_fields(specs)
        first = specs[0]
        for spec in specs[1:]:
            for f in fields(AttentionSpec):
                if f.compare and getattr(spec, f.name) != getattr(first, f.name):
                    raise ValueError(
                        "All attention layers in the same KV cache group must "
                        f"have the same {f.name}."
                    )
        return replace(
            first, draft_block_size=max(spec.draft_block_size for spec in specs)
        )


@dataclass(frozen=True, kw_only=True)
class SuperMergeMLASpec(MLAAttentionSpec):
    draft_block_size: int = 1

    # idiom: vllm/v1/kv_cache_interface.py RSWASpec.merge (delegate to the parent merge, reattach own field); parent is MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        blocks = {spec.draft_block_size for spec in specs}
        if len(blocks) != 1:
            raise ValueError(f"Draft block sizes differ in one group: {blocks}")
        base = super().merge(specs)
        return replace(base, draft_block_size=blocks.pop())


@dataclass(frozen=True, kw_only=True)
class DroppedFlagMLASpec(MLAAttentionSpec):
    draft_block_size: int = 1

    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge; merged spec constructed without the causality flag
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        blocks = {spec.draft_block_size for spec in specs}
        assert len(blocks) == 1, "Draft block sizes differ in one KV cache group."
        return cls(**merged_mla_fields(specs), draft_block_size=blocks.pop())


@dataclass(frozen=True, kw_only=True)
class StrictMergeMLASpec(MLAAttentionSpec):
    draft_block_size: int = 1

    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge (DCP fix); set of flags, assert a single value, pop it
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        non_causal_set = {spec.non_causal_multi_token_decode for spec in specs}
        block_set = {spec.draft_block_size for spec in specs}
        assert len(non_causal_set) == 1 and len(block_set) == 1, (
            "All attention layers in the same KV cache group must agree on "
            "non_causal_multi_token_decode and the draft block size."
        )
        return cls(
            **merged_mla_fields(specs),
            non_causal_multi_token_decode=non_causal_set.pop(),
            draft_block_size=block_set.pop(),
        )


@dataclass(frozen=True, kw_only=True)
class CapabilityMLASpec(StrictMergeMLASpec):
    # idiom: vllm/v1/attention/backends/mla (MLACommonMetadataBuilder.__init__ union over its own layers) as a spec classmethod that is not a merge
    # expect: clean
    @classmethod
    def group_flattens_decode_rows(cls, specs: list[MLAAttentionSpec]) -> bool:
        """Whether any layer of a candidate group needs the flattened decode
        path, for backend selection only."""
        return any(spec.non_causal_multi_token_decode for spec in specs)


@dataclass(frozen=True, kw_only=True)
class RaisingMergeMLASpec(MLAAttentionSpec):
    draft_block_size: int = 1

    # idiom: vllm/v1/kv_cache_interface.py FullAttentionSpec.merge_window_sizes (raise ValueError on disagreement) guarding a delegation to MLAAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        flags = {spec.non_causal_multi_token_decode for spec in specs}
        if len(flags) != 1:
            raise ValueError(
                "Causal and non-causal multi-token decode layers cannot share a "
                "KV cache group."
            )
        blocks = {spec.draft_block_size for spec in specs}
        if len(blocks) != 1:
            raise ValueError(f"Draft block sizes differ in one group: {blocks}")
        # Every layer agrees on the flag, so the parent's union is exact.
        return replace(super().merge(specs), draft_block_size=blocks.pop())


@dataclass(frozen=True, kw_only=True)
class EqualityMergeMLASpec(MLAAttentionSpec):
    draft_block_size: int = 1

    # idiom: vllm/v1/kv_cache_interface.py KVCacheSpec.merge; whole-spec equality check then deepcopy of the first spec
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        if any(spec != specs[0] for spec in specs[1:]):
            raise AssertionError(
                "All layers in the same KV cache group must be the same."
            )
        return copy.deepcopy(specs[0])


@dataclass(frozen=True, kw_only=True)
class WorkspaceMLASpec(MLAAttentionSpec):
    needs_decode_workspace: bool = False

    # idiom: vllm/v1/kv_cache_interface.py FullAttentionSpec.merge (any() for a group-level property); union of a resource flag, agreement required on the causality flag
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        flags = {spec.non_causal_multi_token_decode for spec in specs}
        if len(flags) != 1:
            raise ValueError(
                "All attention layers in the same KV cache group must agree on "
                "non_causal_multi_token_decode."
            )
        return cls(
            **merged_mla_fields(specs),
            non_causal_multi_token_decode=flags.pop(),
            # A shared decode workspace is allocated once per group.
            needs_decode_workspace=any(
                spec.needs_decode_workspace for spec in specs
            ),
        )


@dataclass(frozen=True, kw_only=True)
class CounterMergeMLASpec(MLAAttentionSpec):
    draft_block_size: int = 1

    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge; collections.Counter of the flag, single key required, most_common() for the value
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        counts = Counter(spec.non_causal_multi_token_decode for spec in specs)
        if len(counts) > 1:
            raise ValueError(
                "KV cache group mixes causal and non-causal multi-token decode "
                f"layers: {dict(counts)}"
            )
        (non_causal, _), = counts.most_common(1)
        return cls(
            **merged_mla_fields(specs),
            non_causal_multi_token_decode=non_causal,
            draft_block_size=max(spec.draft_block_size for spec in specs),
        )
