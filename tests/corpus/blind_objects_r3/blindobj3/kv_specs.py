# SPDX-License-Identifier: Apache-2.0
"""KV-cache specs for the fork's draft-only attention layers.

Draft MLA layers of the parallel drafters (DFlash/DSpark) may flatten a
non-causal query block into decode rows; the group-level capability flag is
MLAAttentionSpec.non_causal_multi_token_decode.
"""

import functools
import operator
from dataclasses import dataclass, fields, replace
from typing import Self

from vllm.v1.kv_cache_interface import (
    AttentionSpec,
    FullAttentionSpec,
    MLAAttentionSpec,
)

_NC_MTD = "non_causal_multi_token_decode"


def _union_flag(specs: list[AttentionSpec], name: str) -> bool:
    return any(getattr(spec, name) for spec in specs)


def _check_common_fields(specs: list[AttentionSpec], merged: AttentionSpec) -> None:
    for spec in specs:
        for f in fields(AttentionSpec):
            if not f.compare:
                continue
            assert getattr(spec, f.name) == getattr(merged, f.name), (
                "All attention layers in the same KV cache group must have "
                "the same attention spec."
            )


@dataclass(frozen=True, kw_only=True)
class DSparkDraftMLASpec(MLAAttentionSpec):
    """MLA spec of a DSpark draft layer group."""

    draft_block_len: int = 0

    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        assert all(isinstance(spec, DSparkDraftMLASpec) for spec in specs)
        draft_block_lens = {spec.draft_block_len for spec in specs}
        cache_dtype_strs = {spec.cache_dtype_str for spec in specs}
        assert len(draft_block_lens) == 1 and len(cache_dtype_strs) == 1, (
            "All DSpark draft layers in a KV cache group must share the block "
            "length and cache dtype."
        )
        merged = replace(
            specs[0],
            non_causal=any(spec.non_causal for spec in specs),
            non_causal_multi_token_decode=any(
                spec.non_causal_multi_token_decode for spec in specs
            ),
        )
        _check_common_fields(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class DFlashDraftMLASpec(MLAAttentionSpec):
    """MLA spec of a DFlash draft layer group."""

    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        assert all(isinstance(spec, MLAAttentionSpec) for spec in specs)
        cache_dtype_str_set = {spec.cache_dtype_str for spec in specs}
        model_version_set = {spec.model_version for spec in specs}
        assert len(cache_dtype_str_set) == 1 and len(model_version_set) == 1
        merged_spec = cls(
            block_size=specs[0].block_size,
            num_kv_heads=specs[0].num_kv_heads,
            head_size=specs[0].head_size,
            dtype=specs[0].dtype,
            kv_quant_mode=specs[0].kv_quant_mode,
            dcp_sharded=specs[0].dcp_sharded,
            max_tp_shards=specs[0].max_tp_shards,
            page_size_padded=specs[0].page_size_padded,
            cache_dtype_str=cache_dtype_str_set.pop(),
            model_version=model_version_set.pop(),
            non_causal=any(spec.non_causal for spec in specs),
            # A group can run non-causal decode if one of its layers can.
            non_causal_multi_token_decode=max(
                spec.non_causal_multi_token_decode for spec in specs
            ),
        )
        _check_common_fields(specs, merged_spec)
        return merged_spec


@dataclass(frozen=True, kw_only=True)
class XPressDraftMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        first = specs[0]
        assert all(
            spec.cache_dtype_str == first.cache_dtype_str
            and spec.block_size == first.block_size
            for spec in specs
        )
        multi_token = functools.reduce(
            operator.or_,
            (spec.non_causal_multi_token_decode for spec in specs),
            False,
        )
        return replace(first, non_causal_multi_token_decode=multi_token)


@dataclass(frozen=True, kw_only=True)
class LiLiCorrDraftMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        assert len({spec.cache_dtype_str for spec in specs}) == 1
        num_multi_token = sum(spec.non_causal_multi_token_decode for spec in specs)
        merged = replace(
            specs[0],
            non_causal=any(spec.non_causal for spec in specs),
            non_causal_multi_token_decode=num_multi_token > 0,
        )
        _check_common_fields(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class HybridDraftMLASpec(MLAAttentionSpec):
    """Draft MLA groups mixing causal and block-diffusion layers."""

    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        multi_token_decode = False
        non_causal = False
        for spec in specs:
            assert spec.cache_dtype_str == specs[0].cache_dtype_str
            non_causal |= spec.non_causal
            multi_token_decode |= spec.non_causal_multi_token_decode
        merged = replace(
            specs[0],
            non_causal=non_causal,
            non_causal_multi_token_decode=multi_token_decode,
        )
        _check_common_fields(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class ConservativeDraftMLASpec(MLAAttentionSpec):
    """Only enables flattened decode when every layer supports it."""

    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        assert len({spec.cache_dtype_str for spec in specs}) == 1
        merged = replace(
            specs[0],
            non_causal=any(spec.non_causal for spec in specs),
            non_causal_multi_token_decode=all(
                spec.non_causal_multi_token_decode for spec in specs
            ),
        )
        _check_common_fields(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class GenericDraftMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        assert len({spec.cache_dtype_str for spec in specs}) == 1
        merged = replace(
            specs[0],
            non_causal=_union_flag(specs, "non_causal"),
            non_causal_multi_token_decode=_union_flag(specs, _NC_MTD),
        )
        _check_common_fields(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class StrictDraftMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        cache_dtype_str_set = {spec.cache_dtype_str for spec in specs}
        multi_token_set = {spec.non_causal_multi_token_decode for spec in specs}
        assert len(cache_dtype_str_set) == 1 and len(multi_token_set) == 1, (
            "All draft MLA layers in a KV cache group must agree on the cache "
            "dtype and on non-causal multi-token decode."
        )
        merged = replace(
            specs[0],
            non_causal=any(spec.non_causal for spec in specs),
            non_causal_multi_token_decode=multi_token_set.pop(),
        )
        _check_common_fields(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class RaisingDraftMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py FullAttentionSpec.merge_window_sizes (raise on disagreement)
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        first = specs[0]
        for spec in specs[1:]:
            if spec.non_causal_multi_token_decode != first.non_causal_multi_token_decode:
                raise ValueError(
                    "Draft MLA layers in one KV cache group disagree on "
                    "non_causal_multi_token_decode; split them into separate "
                    "groups."
                )
            if spec.cache_dtype_str != first.cache_dtype_str:
                raise ValueError("Draft MLA layers disagree on the cache dtype.")
        # Any non-causal layer makes the whole group non-causal for scheduling.
        merged = replace(first, non_causal=any(spec.non_causal for spec in specs))
        _check_common_fields(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class DelegatingDraftMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py RSWASpec.merge (checks then delegates)
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        flags = {spec.non_causal_multi_token_decode for spec in specs}
        if len(flags) != 1:
            raise ValueError(
                f"non_causal_multi_token_decode differs within a group: {flags}"
            )
        return super().merge(specs)

    # idiom: vllm/v1/kv_cache_interface.py KVCacheSpec.merge (group summary helper)
    # expect: clean
    @classmethod
    def describe_group(cls, specs: list[Self]) -> str:
        return (
            f"{len(specs)} draft MLA layers, block_size={specs[0].block_size}, "
            f"non_causal={any(s.non_causal for s in specs)}, "
            f"flattened_decode={any(s.non_causal_multi_token_decode for s in specs)}"
        )


@dataclass(frozen=True, kw_only=True)
class PrefixLMDraftSpec(FullAttentionSpec):
    """Non-MLA draft layers of a prefix-LM drafter."""

    prefix_len: int = 0

    # idiom: vllm/v1/kv_cache_interface.py FullAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        prefix_lens = {spec.prefix_len for spec in specs}
        assert len(prefix_lens) == 1, f"prefix_len differs within a group: {prefix_lens}"
        merged = replace(
            specs[0],
            # If any layer in the group is non-causal, treat the group as
            # non-causal so the engine core disables incompatible scheduling.
            non_causal=any(spec.non_causal for spec in specs),
        )
        _check_common_fields(specs, merged)
        return merged
