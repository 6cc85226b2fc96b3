# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""MLA KV-cache specs for draft/target layouts used by the DSpark fork."""
from __future__ import annotations

import functools
import operator
from collections import Counter
from dataclasses import dataclass, fields, replace
from typing import Any, Self

from vllm.v1.kv_cache_interface import AttentionSpec, MLAAttentionSpec


def _common_mla_fields(specs: list[MLAAttentionSpec]) -> dict[str, Any]:
    cache_dtype_str_set = {spec.cache_dtype_str for spec in specs}
    model_version_set = {spec.model_version for spec in specs}
    tokens_per_state_set = {spec.tokens_per_state for spec in specs}
    assert (
        len(cache_dtype_str_set) == 1
        and len(model_version_set) == 1
        and len(tokens_per_state_set) == 1
    ), (
        "All attention layers in the same KV cache group must use the same "
        "quantization method, model version and tokens per state."
    )
    first = specs[0]
    return dict(
        block_size=first.block_size,
        num_kv_heads=first.num_kv_heads,
        head_size=first.head_size,
        dtype=first.dtype,
        kv_quant_mode=first.kv_quant_mode,
        dcp_sharded=first.dcp_sharded,
        max_tp_shards=first.max_tp_shards,
        page_size_padded=first.page_size_padded,
        cache_dtype_str=cache_dtype_str_set.pop(),
        model_version=model_version_set.pop(),
        tokens_per_state=tokens_per_state_set.pop(),
    )


def _check_group(specs: list[MLAAttentionSpec], merged: MLAAttentionSpec) -> None:
    for spec in specs:
        for f in fields(AttentionSpec):
            if not f.compare:
                continue
            assert getattr(spec, f.name) == getattr(merged, f.name), (
                "All attention layers in the same KV cache group must have "
                "the same attention spec."
            )


@dataclass(frozen=True, kw_only=True)
class DraftMLASpec(MLAAttentionSpec):
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        merged = cls(
            **_common_mla_fields(specs),
            non_causal_multi_token_decode=max(
                spec.non_causal_multi_token_decode for spec in specs
            ),
        )
        _check_group(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class CountedMLASpec(MLAAttentionSpec):
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        num_non_causal = sum(spec.non_causal_multi_token_decode for spec in specs)
        merged = cls(
            **_common_mla_fields(specs),
            non_causal_multi_token_decode=num_non_causal > 0,
        )
        _check_group(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class ReducedMLASpec(MLAAttentionSpec):
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        non_causal = functools.reduce(
            operator.or_,
            (spec.non_causal_multi_token_decode for spec in specs),
            False,
        )
        merged = cls(
            **_common_mla_fields(specs), non_causal_multi_token_decode=non_causal
        )
        _check_group(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class PromotedMLASpec(MLAAttentionSpec):
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        merged = cls(**_common_mla_fields(specs))
        for spec in specs:
            if spec.non_causal_multi_token_decode:
                # Promote the group so the builder reserves the flattened rows.
                object.__setattr__(merged, "non_causal_multi_token_decode", True)
                break
        _check_group(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class LeaderMLASpec(MLAAttentionSpec):
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        leader = specs[0]
        merged = cls(
            **_common_mla_fields(specs),
            non_causal_multi_token_decode=leader.non_causal_multi_token_decode,
        )
        _check_group(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class InheritedMergeMLASpec(MLAAttentionSpec):
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        merged = super().merge(specs)
        return replace(merged, cache_dtype_str=merged.cache_dtype_str or "auto")


@dataclass(frozen=True, kw_only=True)
class CompactMLASpec(MLAAttentionSpec):
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        assert len({spec.non_causal_multi_token_decode for spec in specs}) == 1, (
            "All attention layers in the same KV cache group must agree on "
            "non_causal_multi_token_decode."
        )
        merged = cls(**_common_mla_fields(specs))
        _check_group(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class StrictMLASpec(MLAAttentionSpec):
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        non_causal_set = {spec.non_causal_multi_token_decode for spec in specs}
        assert len(non_causal_set) == 1, (
            "All attention layers in the same KV cache group must agree on "
            "non_causal_multi_token_decode."
        )
        merged = cls(
            **_common_mla_fields(specs),
            non_causal_multi_token_decode=non_causal_set.pop(),
        )
        _check_group(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class CheckedMLASpec(MLAAttentionSpec):
    @classmethod
    def merge_non_causal(cls, values: Counter[bool]) -> bool:
        if len(values) != 1:
            raise ValueError(
                "Causal and non-causal multi-token decode layers cannot share "
                f"a KV cache group (got {dict(values)})."
            )
        (value,) = values
        return value

    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        non_causal = cls.merge_non_causal(
            Counter(spec.non_causal_multi_token_decode for spec in specs)
        )
        merged = cls(
            **_common_mla_fields(specs), non_causal_multi_token_decode=non_causal
        )
        _check_group(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class AgreeingMLASpec(MLAAttentionSpec):
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        first = specs[0].non_causal_multi_token_decode
        if any(spec.non_causal_multi_token_decode != first for spec in specs):
            raise ValueError(
                "All attention layers in the same KV cache group must agree on "
                "non_causal_multi_token_decode."
            )
        merged = super().merge(specs)
        return replace(merged, non_causal_multi_token_decode=first)
