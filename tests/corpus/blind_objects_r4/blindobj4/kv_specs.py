# SPDX-License-Identifier: Apache-2.0
"""KV-cache specs for draft MLA layers (DSpark-style non-causal blocks)."""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, replace
from typing import Self

from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    MLAAttentionSpec,
    UniformTypeKVCacheSpecs,
)

from blindobj4._spec_utils import agreed_flag, common_mla_kwargs, union_flag


@dataclass(frozen=True, kw_only=True)
class DSparkDraftMLASpec(MLAAttentionSpec):
    draft_block_width: int = 1

    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        widths = {spec.draft_block_width for spec in specs}
        assert len(widths) == 1, widths
        return cls(
            **common_mla_kwargs(specs),
            draft_block_width=widths.pop(),
            non_causal=any(spec.non_causal for spec in specs),
            non_causal_multi_token_decode=any(
                spec.non_causal_multi_token_decode for spec in specs
            ),
        )


@dataclass(frozen=True, kw_only=True)
class ReduceMergeMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        flattened = functools.reduce(
            operator.or_,
            (spec.non_causal_multi_token_decode for spec in specs),
            False,
        )
        return cls(
            **common_mla_kwargs(specs),
            non_causal_multi_token_decode=flattened,
        )


@dataclass(frozen=True, kw_only=True)
class MaxMergeMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        kwargs = common_mla_kwargs(specs)
        kwargs["non_causal_multi_token_decode"] = max(
            spec.non_causal_multi_token_decode for spec in specs
        )
        return cls(**kwargs)


@dataclass(frozen=True, kw_only=True)
class CountMergeMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        num_flattening = sum(
            int(spec.non_causal_multi_token_decode) for spec in specs
        )
        return cls(
            **common_mla_kwargs(specs),
            non_causal=any(spec.non_causal for spec in specs),
            non_causal_multi_token_decode=num_flattening > 0,
        )


@dataclass(frozen=True, kw_only=True)
class LoopMergeMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        non_causal = False
        flattened = False
        for spec in specs:
            non_causal = non_causal or spec.non_causal
            flattened = flattened or spec.non_causal_multi_token_decode
        return cls(
            **common_mla_kwargs(specs),
            non_causal=non_causal,
            non_causal_multi_token_decode=flattened,
        )


@dataclass(frozen=True, kw_only=True)
class HelperUnionMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        flags = {
            name: union_flag(specs, name)
            for name in ("non_causal", "non_causal_multi_token_decode")
        }
        return cls(**common_mla_kwargs(specs), **flags)


@dataclass(frozen=True, kw_only=True)
class ReplaceUnionMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py RSWASpec.merge (delegate, then reattach)
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        merged = super().merge(specs)
        flags = {spec.non_causal_multi_token_decode for spec in specs}
        return replace(merged, non_causal_multi_token_decode=True in flags)


@dataclass(frozen=True, kw_only=True)
class StrictDraftMLASpec(MLAAttentionSpec):
    draft_block_width: int = 1

    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        widths = {spec.draft_block_width for spec in specs}
        flattened = {spec.non_causal_multi_token_decode for spec in specs}
        assert len(widths) == 1, widths
        if len(flattened) != 1:
            raise ValueError(
                "All MLA layers in a KV cache group must agree on "
                "non_causal_multi_token_decode; split draft and target layers "
                "into separate groups."
            )
        return cls(
            **common_mla_kwargs(specs),
            draft_block_width=widths.pop(),
            non_causal=any(spec.non_causal for spec in specs),
            non_causal_multi_token_decode=flattened.pop(),
        )


@dataclass(frozen=True, kw_only=True)
class HelperAgreedMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        return cls(
            **common_mla_kwargs(specs),
            non_causal=union_flag(specs, "non_causal"),
            non_causal_multi_token_decode=agreed_flag(
                specs, "non_causal_multi_token_decode"
            ),
        )


@dataclass(frozen=True, kw_only=True)
class ReplaceAgreedMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py RSWASpec.merge (delegate, then reattach)
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        first = specs[0].non_causal_multi_token_decode
        assert all(
            spec.non_causal_multi_token_decode == first for spec in specs
        ), "mixed non-causal multi-token decode layers in one KV cache group"
        merged = super().merge(specs)
        return replace(merged, non_causal_multi_token_decode=first)


@dataclass(frozen=True, kw_only=True)
class AllAgreeMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        flags = [spec.non_causal_multi_token_decode for spec in specs]
        if any(flags) and not all(flags):
            raise ValueError(
                "non_causal_multi_token_decode must be uniform within a KV cache group"
            )
        return cls(
            **common_mla_kwargs(specs),
            non_causal=any(spec.non_causal for spec in specs),
            non_causal_multi_token_decode=all(flags),
        )


@dataclass(frozen=True, kw_only=True)
class PrefixLMFullAttentionSpec(FullAttentionSpec):
    prefix_lm: bool = False

    # idiom: vllm/v1/kv_cache_interface.py FullAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        merged = super().merge(specs)
        return replace(
            merged,
            prefix_lm=any(spec.prefix_lm for spec in specs),
            non_causal=any(spec.non_causal for spec in specs),
        )


# idiom: vllm/model_executor/layers/attention/mla_attention.py MLACommonMetadataBuilder.__init__ (per-layer flag)
# expect: clean
def groups_with_flattened_decode(kv_cache_config: KVCacheConfig) -> list[int]:
    group_ids: list[int] = []
    for gid, group in enumerate(kv_cache_config.kv_cache_groups):
        spec = group.kv_cache_spec
        layer_specs = (
            list(spec.kv_cache_specs.values())
            if isinstance(spec, UniformTypeKVCacheSpecs)
            else [spec]
        )
        if any(
            getattr(layer_spec, "non_causal_multi_token_decode", False)
            for layer_spec in layer_specs
        ):
            group_ids.append(gid)
    return group_ids
