# SPDX-License-Identifier: Apache-2.0
"""KV-cache specs for the fork's DSpark / Kimi draft layers.

DSpark draft layers flatten a non-causal query block into decode rows and set
``non_causal_multi_token_decode``; target MLA layers leave it False.
"""

import copy
import functools
import operator
from dataclasses import dataclass, fields, replace
from typing import Self

from vllm.v1.kv_cache_interface import (
    AttentionSpec,
    FullAttentionSpec,
    MLAAttentionSpec,
)


def _same_except(specs: list[MLAAttentionSpec], *names: str) -> bool:
    """Whether all specs agree on every compared field but ``names``."""
    base = specs[0]
    for spec in specs[1:]:
        for f in fields(spec):
            if f.compare and f.name not in names:
                if getattr(spec, f.name) != getattr(base, f.name):
                    return False
    return True


@dataclass(frozen=True, kw_only=True)
class DSparkDraftMLASpec(MLAAttentionSpec):
    # idiom: MLAAttentionSpec.merge's any() rewritten as functools.reduce(operator.or_, ...) and applied with dataclasses.replace on the first spec
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        if not _same_except(specs, "non_causal_multi_token_decode"):
            raise AssertionError(
                "All layers in the same KV cache group must be the same."
            )
        non_causal = functools.reduce(
            operator.or_, (s.non_causal_multi_token_decode for s in specs), False
        )
        return replace(specs[0], non_causal_multi_token_decode=non_causal)


@dataclass(frozen=True, kw_only=True)
class DraftBlockMLASpec(MLAAttentionSpec):
    draft_block_size: int = 1

    # idiom: merged flag computed by a loop with early break (first non-causal layer wins), then cls(...) built field by field like MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        block_sizes = {spec.draft_block_size for spec in specs}
        assert len(block_sizes) == 1, "draft layers must share draft_block_size"
        non_causal = False
        for spec in specs:
            if spec.non_causal_multi_token_decode:
                non_causal = True
                break
        return cls(
            block_size=specs[0].block_size,
            num_kv_heads=specs[0].num_kv_heads,
            head_size=specs[0].head_size,
            dtype=specs[0].dtype,
            kv_quant_mode=specs[0].kv_quant_mode,
            dcp_sharded=specs[0].dcp_sharded,
            cache_dtype_str=specs[0].cache_dtype_str,
            model_version=specs[0].model_version,
            draft_block_size=block_sizes.pop(),
            non_causal_multi_token_decode=non_causal,
        )


@dataclass(frozen=True, kw_only=True)
class TargetSharedMLASpec(MLAAttentionSpec):
    # idiom: KVCacheSpec.merge's `copy.deepcopy(specs[0])` kept, but the equality check skips non_causal_multi_token_decode, so the group takes the first layer's flag
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        if not _same_except(specs, "non_causal_multi_token_decode"):
            raise AssertionError(
                "All layers in the same KV cache group must be the same."
            )
        return copy.deepcopy(specs[0])


@dataclass(frozen=True, kw_only=True)
class ConservativeMLASpec(MLAAttentionSpec):
    # idiom: MLAAttentionSpec.merge with any() swapped for all() ("only flatten if every layer can"): a mixed group silently gets the least permissive layer's flag
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        assert _same_except(specs, "non_causal_multi_token_decode")
        return replace(
            specs[0],
            non_causal_multi_token_decode=all(
                spec.non_causal_multi_token_decode for spec in specs
            ),
        )


@dataclass(frozen=True, kw_only=True)
class KimiDraftMLASpec(MLAAttentionSpec):
    draft_layer_ids: tuple[int, ...] = ()

    # idiom: RSWASpec.merge-style delegation: super().merge(specs) (MLAAttentionSpec.merge, any() over the flag) then dataclasses.replace to reattach a subclass field
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        merged = super().merge(specs)
        layer_ids = sorted({i for spec in specs for i in spec.draft_layer_ids})
        return replace(merged, draft_layer_ids=tuple(layer_ids))


@dataclass(frozen=True, kw_only=True)
class CompactMLASpec(MLAAttentionSpec):
    # idiom: MLAAttentionSpec.merge's cls(...) constructor copied with non_causal_multi_token_decode left out, so even an all-non-causal group merges to the default False
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        cache_dtype_str_set = {spec.cache_dtype_str for spec in specs}
        model_version_set = {spec.model_version for spec in specs}
        assert len(cache_dtype_str_set) == 1 and len(model_version_set) == 1
        return cls(
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
        )


@dataclass(frozen=True, kw_only=True)
class HybridMLASpec(MLAAttentionSpec):
    # idiom: merged spec built causal, then the flag patched with object.__setattr__ (as _apply_alignment_padding does for page_size_padded) to `True in {layer flags}`
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        merged = copy.deepcopy(specs[0])
        object.__setattr__(merged, "non_causal_multi_token_decode", False)
        for spec in specs:
            for f in fields(AttentionSpec):
                if f.compare:
                    assert getattr(spec, f.name) == getattr(merged, f.name)
        flags = {spec.non_causal_multi_token_decode for spec in specs}
        object.__setattr__(merged, "non_causal_multi_token_decode", True in flags)
        return merged


@dataclass(frozen=True, kw_only=True)
class AgreeingMLASpec(MLAAttentionSpec):
    # idiom: the upstream DCP fix for AttentionSpec.merge: {spec.non_causal_multi_token_decode} set, assert len == 1, then .pop() into cls(...)
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        non_causal_mtd_set = {spec.non_causal_multi_token_decode for spec in specs}
        assert len(non_causal_mtd_set) == 1, (
            "All attention layers in the same KV cache group must agree on "
            "non_causal_multi_token_decode."
        )
        cache_dtype_str_set = {spec.cache_dtype_str for spec in specs}
        assert len(cache_dtype_str_set) == 1
        return cls(
            block_size=specs[0].block_size,
            num_kv_heads=specs[0].num_kv_heads,
            head_size=specs[0].head_size,
            dtype=specs[0].dtype,
            kv_quant_mode=specs[0].kv_quant_mode,
            dcp_sharded=specs[0].dcp_sharded,
            max_tp_shards=specs[0].max_tp_shards,
            cache_dtype_str=cache_dtype_str_set.pop(),
            non_causal_multi_token_decode=non_causal_mtd_set.pop(),
        )


@dataclass(frozen=True, kw_only=True)
class PrefixLMFullSpec(FullAttentionSpec):
    image_token_window: int | None = None

    # idiom: FullAttentionSpec.merge's `non_causal=any(spec.non_causal ...)` (engine-core scheduling flag, unioned on purpose); no non_causal_multi_token_decode involved
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        windows = {spec.image_token_window for spec in specs}
        assert len(windows) == 1, "PrefixLM layers must share image_token_window"
        base = specs[0]
        assert all(
            replace(spec, non_causal=base.non_causal) == base for spec in specs
        ), "All layers in the same KV cache group must be the same."
        return replace(base, non_causal=any(spec.non_causal for spec in specs))


@dataclass(frozen=True, kw_only=True)
class CheckedKimiDraftMLASpec(MLAAttentionSpec):
    draft_layer_ids: tuple[int, ...] = ()

    # idiom: refuse a mixed group first (raise ValueError when the flags disagree), then delegate to super().merge (whose any() over agreeing layers keeps their common value)
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        if len({spec.non_causal_multi_token_decode for spec in specs}) > 1:
            raise ValueError(
                "Causal target and non-causal draft MLA layers cannot share a "
                "KV cache group; put the draft layers in their own group."
            )
        merged = super().merge(specs)
        layer_ids = sorted({i for spec in specs for i in spec.draft_layer_ids})
        return replace(merged, draft_layer_ids=tuple(layer_ids))


@dataclass(frozen=True, kw_only=True)
class StrictDSparkMLASpec(MLAAttentionSpec):
    # idiom: assert all(flag == specs[0].flag) before returning dataclasses.replace of the first spec (agreement enforced, flag preserved)
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        first = specs[0]
        assert all(
            spec.non_causal_multi_token_decode == first.non_causal_multi_token_decode
            for spec in specs
        ), "non_causal_multi_token_decode must be uniform within a KV cache group"
        assert _same_except(specs)
        return replace(first)


@dataclass(frozen=True)
class DraftAttentionCapabilities:
    """What the draft attention backends of a drafter can do; reported in the
    startup log. Not a KV-cache spec."""

    non_causal_multi_token_decode: bool = False
    supports_dcp: bool = False

    # idiom: a `merge` classmethod with any() on non_causal_multi_token_decode on a plain capability record that is not a KV-cache/attention spec class
    # expect: clean
    @classmethod
    def merge(
        cls, caps: list["DraftAttentionCapabilities"]
    ) -> "DraftAttentionCapabilities":
        return cls(
            non_causal_multi_token_decode=any(
                c.non_causal_multi_token_decode for c in caps
            ),
            supports_dcp=all(c.supports_dcp for c in caps),
        )
