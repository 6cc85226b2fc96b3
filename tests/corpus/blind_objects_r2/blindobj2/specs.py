# KV-cache spec variants registered by the fork for draft/target MLA groups.
import functools
import operator
from collections import Counter
from dataclasses import dataclass, fields, replace
from typing import Self

from vllm.v1.kv_cache_interface import (
    AttentionSpec,
    FullAttentionSpec,
    MLAAttentionSpec,
)


def _mla_base_kwargs(specs) -> dict:
    s0 = specs[0]
    return dict(
        block_size=s0.block_size,
        num_kv_heads=s0.num_kv_heads,
        head_size=s0.head_size,
        dtype=s0.dtype,
        kv_quant_mode=s0.kv_quant_mode,
        dcp_sharded=s0.dcp_sharded,
        max_tp_shards=s0.max_tp_shards,
        page_size_padded=s0.page_size_padded,
        num_head_slots=s0.num_head_slots,
        state_content_bytes=s0.state_content_bytes,
        cache_dtype_str=s0.cache_dtype_str,
        topk_buffer_width=s0.topk_buffer_width,
        tokens_per_state=s0.tokens_per_state,
        model_version=s0.model_version,
        cache_role=s0.cache_role,
        is_index_group_leader=s0.is_index_group_leader,
        block_stride_alignment=s0.block_stride_alignment,
    )


def _check_same_attention(specs, merged) -> None:
    for spec in specs:
        for f in fields(AttentionSpec):
            if not f.compare:
                continue
            assert getattr(spec, f.name) == getattr(merged, f.name), (
                "All attention layers in the same KV cache group must have "
                "the same attention spec."
            )


@dataclass(frozen=True, kw_only=True)
class DraftMLAAttentionSpec(MLAAttentionSpec):
    """MLA spec for DFlash draft layers sharing a group with target layers."""

    # idiom: vllm v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        assert all(isinstance(s, MLAAttentionSpec) for s in specs)
        merged = cls(
            **_mla_base_kwargs(specs),
            non_causal_multi_token_decode=max(
                s.non_causal_multi_token_decode for s in specs
            ),
        )
        _check_same_attention(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class StrictDraftMLAAttentionSpec(MLAAttentionSpec):
    """Same as DraftMLAAttentionSpec but refuses mixed decode modes."""

    # idiom: vllm v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        assert all(isinstance(s, MLAAttentionSpec) for s in specs)
        nctd = {s.non_causal_multi_token_decode for s in specs}
        assert len(nctd) == 1, (
            "All MLA layers in the same KV cache group must agree on "
            "non_causal_multi_token_decode."
        )
        merged = cls(
            **_mla_base_kwargs(specs),
            non_causal_multi_token_decode=nctd.pop(),
        )
        _check_same_attention(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class LoopMergedMLASpec(MLAAttentionSpec):
    # idiom: vllm v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        flattened = False
        for spec in specs:
            flattened |= spec.non_causal_multi_token_decode
        kwargs = _mla_base_kwargs(specs)
        kwargs["non_causal_multi_token_decode"] = flattened
        merged = cls(**kwargs)
        _check_same_attention(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class LoopCheckedMLASpec(MLAAttentionSpec):
    # idiom: vllm v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        flattened = specs[0].non_causal_multi_token_decode
        for spec in specs[1:]:
            if spec.non_causal_multi_token_decode != flattened:
                raise ValueError(
                    "Cannot group MLA layers with different "
                    "non_causal_multi_token_decode settings."
                )
        kwargs = _mla_base_kwargs(specs)
        kwargs["non_causal_multi_token_decode"] = flattened
        merged = cls(**kwargs)
        _check_same_attention(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class ReplaceMergedMLASpec(MLAAttentionSpec):
    # idiom: vllm v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        base = cls(**_mla_base_kwargs(specs))
        flag = functools.reduce(
            operator.or_, (s.non_causal_multi_token_decode for s in specs), False
        )
        merged = replace(base, non_causal_multi_token_decode=flag)
        _check_same_attention(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class ReplaceCheckedMLASpec(MLAAttentionSpec):
    # idiom: vllm v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        flags = [s.non_causal_multi_token_decode for s in specs]
        if any(flags) and not all(flags):
            raise ValueError("mixed non_causal_multi_token_decode in one group")
        base = cls(**_mla_base_kwargs(specs))
        merged = replace(base, non_causal_multi_token_decode=flags[0])
        _check_same_attention(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class MajorityMLASpec(MLAAttentionSpec):
    # idiom: vllm v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        votes = Counter(s.non_causal_multi_token_decode for s in specs)
        merged = cls(
            **_mla_base_kwargs(specs),
            non_causal_multi_token_decode=votes.most_common(1)[0][0],
        )
        _check_same_attention(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class ConservativeMLASpec(MLAAttentionSpec):
    # idiom: vllm v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        # Only enable flattening when every layer wants it.
        merged = cls(
            **_mla_base_kwargs(specs),
            non_causal_multi_token_decode=all(
                s.non_causal_multi_token_decode for s in specs
            ),
        )
        _check_same_attention(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class PrefixLMMLASpec(MLAAttentionSpec):
    """MLA spec whose group also carries the plain non_causal flag."""

    # idiom: vllm v1/kv_cache_interface.py FullAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        nctd = {s.non_causal_multi_token_decode for s in specs}
        if len(nctd) != 1:
            raise ValueError("non_causal_multi_token_decode must agree per group")
        merged = cls(
            **_mla_base_kwargs(specs),
            # Any non-causal layer makes the group non-causal for scheduling.
            non_causal=any(s.non_causal for s in specs),
            non_causal_multi_token_decode=next(iter(nctd)),
        )
        _check_same_attention(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class PrefixLMFullSpec(FullAttentionSpec):
    # idiom: vllm v1/kv_cache_interface.py FullAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        merged = super().merge(specs)
        return replace(merged, non_causal=any(s.non_causal for s in specs))


@dataclass(frozen=True, kw_only=True)
class DelegatingMLASpec(MLAAttentionSpec):
    # idiom: vllm v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        first = specs[0].non_causal_multi_token_decode
        assert all(s.non_causal_multi_token_decode == first for s in specs), (
            "layers in one group disagree on non_causal_multi_token_decode"
        )
        return super().merge(specs)
