"""SG201 cases: ``merge`` of KV-cache specs and how the group's causality
flag is combined."""

from __future__ import annotations

import functools
import operator
from collections import Counter
from dataclasses import dataclass, fields, replace
from typing import Any

from vllm.v1.kv_cache_interface import (
    AttentionSpec,
    FullAttentionSpec,
    MLAAttentionSpec,
)


def _full_attention_fields(specs: list[FullAttentionSpec]) -> dict[str, Any]:
    """Fields every layer of a group shares (taken from the first spec)."""
    first = specs[0]
    return dict(
        block_size=first.block_size,
        block_stride_alignment=first.block_stride_alignment,
        num_kv_heads=first.num_kv_heads,
        head_size=first.head_size,
        head_size_v=first.head_size_v,
        dtype=first.dtype,
        kv_quant_mode=first.kv_quant_mode,
        dcp_sharded=first.dcp_sharded,
        max_tp_shards=first.max_tp_shards,
        page_size_padded=first.page_size_padded,
        num_head_slots=first.num_head_slots,
        state_content_bytes=first.state_content_bytes,
        tokens_per_state=first.tokens_per_state,
    )


def _check_shared_fields(specs: list[AttentionSpec], merged: AttentionSpec) -> None:
    for spec in specs:
        for f in fields(AttentionSpec):
            if not f.compare:
                continue
            assert getattr(spec, f.name) == getattr(merged, f.name), (
                "All attention layers in the same KV cache group must have "
                "the same attention spec."
            )


@dataclass(frozen=True, kw_only=True)
class PrefixLMAttentionSpec(FullAttentionSpec):
    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py FullAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[FullAttentionSpec]) -> "PrefixLMAttentionSpec":
        assert all(isinstance(spec, FullAttentionSpec) for spec in specs)
        sliding_window = set(
            spec.sliding_window for spec in specs if spec.sliding_window is not None
        )
        attention_chunk_size = set(
            spec.attention_chunk_size
            for spec in specs
            if spec.attention_chunk_size is not None
        )
        merged_spec = cls(
            **_full_attention_fields(specs),
            sliding_window=cls.merge_window_sizes(sliding_window),
            attention_chunk_size=cls.merge_window_sizes(attention_chunk_size),
            non_causal=any(spec.non_causal for spec in specs),
        )
        _check_shared_fields(specs, merged_spec)
        return merged_spec


@dataclass(frozen=True, kw_only=True)
class StrictPrefixLMAttentionSpec(FullAttentionSpec):
    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py FullAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[FullAttentionSpec]) -> "StrictPrefixLMAttentionSpec":
        assert all(isinstance(spec, FullAttentionSpec) for spec in specs)
        assert not any(isinstance(spec, MLAAttentionSpec) for spec in specs), (
            "MLAAttentionSpec should be merged in MLAAttentionSpec.merge"
        )
        sliding_window = set(
            spec.sliding_window for spec in specs if spec.sliding_window is not None
        )
        non_causal_set = {spec.non_causal for spec in specs}
        assert len(non_causal_set) == 1, (
            "All layers in one KV cache group must agree on causality."
        )
        merged_spec = cls(
            **_full_attention_fields(specs),
            sliding_window=cls.merge_window_sizes(sliding_window),
            non_causal=non_causal_set.pop(),
        )
        _check_shared_fields(specs, merged_spec)
        return merged_spec


@dataclass(frozen=True, kw_only=True)
class DraftMLAAttentionSpec(MLAAttentionSpec):
    """MLA spec carrying whether the draft layer attends causally."""

    draft_causal: bool = True

    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[MLAAttentionSpec]) -> "DraftMLAAttentionSpec":
        base = super().merge(specs)
        causal_flags = [getattr(spec, "draft_causal", True) for spec in specs]
        return replace(base, draft_causal=any(causal_flags))


@dataclass(frozen=True, kw_only=True)
class AgreeingDraftMLAAttentionSpec(MLAAttentionSpec):
    draft_causal: bool = True

    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[MLAAttentionSpec]) -> "AgreeingDraftMLAAttentionSpec":
        base = super().merge(specs)
        first = getattr(specs[0], "draft_causal", True)
        assert all(getattr(spec, "draft_causal", True) == first for spec in specs), (
            "Draft layers sharing a KV cache group must agree on causality."
        )
        return replace(base, draft_causal=first)


@dataclass(frozen=True, kw_only=True)
class ReducedFlagAttentionSpec(FullAttentionSpec):
    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py RSWASpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[FullAttentionSpec]) -> "ReducedFlagAttentionSpec":
        base = FullAttentionSpec.merge(
            [replace(spec, non_causal=False) for spec in specs]
        )
        non_causal = functools.reduce(
            operator.or_, (spec.non_causal for spec in specs), False
        )
        return cls(
            **_full_attention_fields([base]),
            sliding_window=base.sliding_window,
            attention_chunk_size=base.attention_chunk_size,
            non_causal=non_causal,
        )


@dataclass(frozen=True, kw_only=True)
class LoopCheckedAttentionSpec(FullAttentionSpec):
    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py RSWASpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[FullAttentionSpec]) -> "LoopCheckedAttentionSpec":
        non_causal = specs[0].non_causal
        for spec in specs[1:]:
            if spec.non_causal != non_causal:
                raise ValueError(
                    "Causal and non-causal layers cannot share a KV cache group."
                )
        base = FullAttentionSpec.merge(specs)
        return cls(
            **_full_attention_fields([base]),
            sliding_window=base.sliding_window,
            attention_chunk_size=base.attention_chunk_size,
            non_causal=non_causal,
        )


@dataclass(frozen=True, kw_only=True)
class MaxFlagAttentionSpec(FullAttentionSpec):
    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py FullAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[FullAttentionSpec]) -> "MaxFlagAttentionSpec":
        sliding_window = {s.sliding_window for s in specs if s.sliding_window}
        merged_spec = cls(
            **_full_attention_fields(specs),
            sliding_window=cls.merge_window_sizes(sliding_window),
            non_causal=max(spec.non_causal for spec in specs),
        )
        _check_shared_fields(specs, merged_spec)
        return merged_spec


@dataclass(frozen=True, kw_only=True)
class AccumulatedFlagAttentionSpec(FullAttentionSpec):
    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py SinkFullAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[FullAttentionSpec]) -> "AccumulatedFlagAttentionSpec":
        non_causal = False
        windows: set[int] = set()
        for spec in specs:
            non_causal |= spec.non_causal
            if spec.sliding_window is not None:
                windows.add(spec.sliding_window)
        merged_spec = cls(
            **_full_attention_fields(specs),
            sliding_window=cls.merge_window_sizes(windows),
            non_causal=non_causal,
        )
        _check_shared_fields(specs, merged_spec)
        return merged_spec


@dataclass(frozen=True, kw_only=True)
class MembershipFlagAttentionSpec(FullAttentionSpec):
    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[FullAttentionSpec]) -> "MembershipFlagAttentionSpec":
        non_causal_set = {spec.non_causal for spec in specs}
        kwargs = _full_attention_fields(specs)
        kwargs.update(non_causal=True in non_causal_set)
        merged_spec = cls(**kwargs)
        _check_shared_fields(specs, merged_spec)
        return merged_spec


@dataclass(frozen=True, kw_only=True)
class CountedFlagAttentionSpec(FullAttentionSpec):
    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[FullAttentionSpec]) -> "CountedFlagAttentionSpec":
        counts = Counter(spec.non_causal for spec in specs)
        if len(counts) != 1:
            raise ValueError(f"Mixed causality in one KV cache group: {counts}")
        kwargs = _full_attention_fields(specs)
        kwargs.update(non_causal=next(iter(counts)))
        merged_spec = cls(**kwargs)
        _check_shared_fields(specs, merged_spec)
        return merged_spec


@dataclass(frozen=True, kw_only=True)
class GuardedAnyAttentionSpec(FullAttentionSpec):
    # idiom: vllm-project/vllm vllm/v1/kv_cache_interface.py SinkFullAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[FullAttentionSpec]) -> "GuardedAnyAttentionSpec":
        flags = [spec.non_causal for spec in specs]
        if any(flags) and not all(flags):
            raise ValueError(
                "All attention layers in the same KV cache group must agree "
                "on non_causal."
            )
        merged_spec = cls(
            **_full_attention_fields(specs),
            sliding_window=cls.merge_window_sizes(
                {s.sliding_window for s in specs if s.sliding_window is not None}
            ),
            non_causal=flags[0],
        )
        _check_shared_fields(specs, merged_spec)
        return merged_spec
