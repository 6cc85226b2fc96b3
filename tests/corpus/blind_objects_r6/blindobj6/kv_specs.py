# SPDX-License-Identifier: Apache-2.0
"""Fork KV-cache specs for DSpark draft layers and draft-side attention.

Every class here follows ``vllm/v1/kv_cache_interface.py``: ``merge`` is the
classmethod the KV-cache manager calls to turn one group's per-layer specs
into the group's spec.
"""

import copy
import functools
import operator
from dataclasses import dataclass, replace
from typing import Any, Self

from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec


def _shared_mla_kwargs(specs: list[MLAAttentionSpec]) -> dict[str, Any]:
    """Fields every MLA layer of a group must share (everything but the
    non-causal decode capability)."""
    head = specs[0]
    for spec in specs[1:]:
        if (
            spec.block_size,
            spec.num_kv_heads,
            spec.head_size,
            spec.dtype,
            spec.cache_dtype_str,
            spec.tokens_per_state,
            spec.model_version,
            spec.cache_role,
        ) != (
            head.block_size,
            head.num_kv_heads,
            head.head_size,
            head.dtype,
            head.cache_dtype_str,
            head.tokens_per_state,
            head.model_version,
            head.cache_role,
        ):
            raise AssertionError(
                "All attention layers in the same KV cache group must use the "
                "same MLA layout."
            )
    return dict(
        block_size=head.block_size,
        num_kv_heads=head.num_kv_heads,
        head_size=head.head_size,
        dtype=head.dtype,
        kv_quant_mode=head.kv_quant_mode,
        dcp_sharded=head.dcp_sharded,
        max_tp_shards=head.max_tp_shards,
        page_size_padded=head.page_size_padded,
        num_head_slots=head.num_head_slots,
        state_content_bytes=head.state_content_bytes,
        cache_dtype_str=head.cache_dtype_str,
        topk_buffer_width=head.topk_buffer_width,
        tokens_per_state=head.tokens_per_state,
        model_version=head.model_version,
        cache_role=head.cache_role,
        is_index_group_leader=head.is_index_group_leader,
        block_stride_alignment=head.block_stride_alignment,
    )


@dataclass(frozen=True, kw_only=True)
class DSparkDraftMLASpec(MLAAttentionSpec):
    """DSpark draft layers sharing the target's MLA cache layout."""

    # idiom: MLAAttentionSpec.merge (kv_cache_interface.py) with the pre-fix any() rewritten as functools.reduce(operator.or_, ...) over the group's non_causal_multi_token_decode
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        non_causal_mtd = functools.reduce(
            operator.or_,
            (spec.non_causal_multi_token_decode for spec in specs),
            False,
        )
        return cls(
            **_shared_mla_kwargs(specs),
            non_causal_multi_token_decode=non_causal_mtd,
        )


@dataclass(frozen=True, kw_only=True)
class BlockDraftMLASpec(MLAAttentionSpec):
    """Block-parallel draft heads (DFlash over MLA)."""

    # idiom: MLAAttentionSpec.merge's any(non_causal_multi_token_decode) unrolled into a for loop with early break
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        non_causal_mtd = False
        for spec in specs:
            if spec.non_causal_multi_token_decode:
                non_causal_mtd = True
                break
        return cls(
            **_shared_mla_kwargs(specs),
            non_causal_multi_token_decode=non_causal_mtd,
        )


@dataclass(frozen=True, kw_only=True)
class LeaderMLASpec(MLAAttentionSpec):
    """Index-sharing groups: the leader layer's spec stands for the group."""

    # idiom: KVCacheSpec.merge's copy of specs[0], but after comparing only a tuple of layout fields, so the first layer's non_causal_multi_token_decode stands for the group (dataclasses.replace)
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        leader = next(
            (spec for spec in specs if spec.is_index_group_leader), specs[0]
        )
        _shared_mla_kwargs(specs)  # validates the layout fields
        return replace(leader, is_index_group_leader=True)


@dataclass(frozen=True, kw_only=True)
class PatchedMLASpec(MLAAttentionSpec):
    """Spec built first, group capability patched in afterwards."""

    # idiom: _apply_alignment_padding's object.__setattr__ on a frozen MLA spec, here setting non_causal_multi_token_decode to max() over the group
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        merged = cls(**_shared_mla_kwargs(specs))
        object.__setattr__(
            merged,
            "non_causal_multi_token_decode",
            max(spec.non_causal_multi_token_decode for spec in specs),
        )
        return merged


@dataclass(frozen=True, kw_only=True)
class CompactMLASpec(MLAAttentionSpec):
    """MLA spec whose merge was trimmed to the layout fields."""

    # idiom: MLAAttentionSpec.merge's cls(...) rebuild that forgets to pass non_causal_multi_token_decode (defaults False): a group whose layers all set it loses it
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        assert all(isinstance(spec, MLAAttentionSpec) for spec in specs)
        return cls(**_shared_mla_kwargs(specs))


# ---------------------------------------------------------------------------
# Merges that keep the group honest.
# ---------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class AgreeingMLASpec(MLAAttentionSpec):
    @staticmethod
    def _agree(specs: list[MLAAttentionSpec], name: str) -> Any:
        values = {getattr(spec, name) for spec in specs}
        assert len(values) == 1, (
            f"All attention layers in the same KV cache group must agree on {name}."
        )
        return values.pop()

    # idiom: AttentionSpec.merge after the DSpark+DCP fix: set of non_causal_multi_token_decode values asserted to have one member, then popped (via a staticmethod helper)
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        return cls(
            **_shared_mla_kwargs(specs),
            non_causal_multi_token_decode=cls._agree(
                specs, "non_causal_multi_token_decode"
            ),
        )


@dataclass(frozen=True, kw_only=True)
class PrefixLMDraftSpec(FullAttentionSpec):
    """Prefix-LM draft layers (full attention, non-causal prompt)."""

    draft_window: int | None = None

    # idiom: FullAttentionSpec.merge / RSWASpec.merge: non_causal=any(spec.non_causal ...) on purpose (scheduling capability), other fields required to agree
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        windows = {spec.draft_window for spec in specs}
        if len(windows) != 1:
            raise ValueError("Draft layers of one group must share draft_window.")
        base = FullAttentionSpec.merge(specs)  # type: ignore[arg-type]
        return cls(
            block_size=base.block_size,
            block_stride_alignment=base.block_stride_alignment,
            num_kv_heads=base.num_kv_heads,
            head_size=base.head_size,
            head_size_v=base.head_size_v,
            dtype=base.dtype,
            kv_quant_mode=base.kv_quant_mode,
            dcp_sharded=base.dcp_sharded,
            max_tp_shards=base.max_tp_shards,
            page_size_padded=base.page_size_padded,
            num_head_slots=base.num_head_slots,
            state_content_bytes=base.state_content_bytes,
            tokens_per_state=base.tokens_per_state,
            sliding_window=base.sliding_window,
            attention_chunk_size=base.attention_chunk_size,
            non_causal=any(spec.non_causal for spec in specs),
            draft_window=windows.pop(),
        )


@dataclass(frozen=True, kw_only=True)
class StrictDraftMLASpec(MLAAttentionSpec):
    # idiom: merge raising ValueError when a set comprehension over non_causal_multi_token_decode has more than one value, then taking specs[0]'s (now common) value
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        if len({spec.non_causal_multi_token_decode for spec in specs}) > 1:
            raise ValueError(
                "A KV cache group cannot mix causal target layers with "
                "non-causal draft layers; give the drafter its own group."
            )
        return cls(
            **_shared_mla_kwargs(specs),
            non_causal_multi_token_decode=specs[0].non_causal_multi_token_decode,
        )


@dataclass(frozen=True, kw_only=True)
class CheckedParentMLASpec(MLAAttentionSpec):
    # idiom: subclass merge that refuses disagreeing layers with all(... == specs[0]...) and only then delegates to MLAAttentionSpec.merge via super() (its any() then sees one value)
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        first = specs[0].non_causal_multi_token_decode
        if not all(spec.non_causal_multi_token_decode == first for spec in specs):
            raise AssertionError(
                "All attention layers in the same KV cache group must agree on "
                "non_causal_multi_token_decode."
            )
        return copy.copy(super().merge(specs))


@dataclass(frozen=True, kw_only=True)
class ReducedAgreementMLASpec(MLAAttentionSpec):
    # idiom: merge computing both functools.reduce(operator.or_) and reduce(operator.and_) of non_causal_multi_token_decode and refusing the group unless they agree
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        flags = [spec.non_causal_multi_token_decode for spec in specs]
        any_flag = functools.reduce(operator.or_, flags, False)
        all_flag = functools.reduce(operator.and_, flags, True)
        if any_flag != all_flag:
            raise ValueError(
                "KV cache group mixes causal and non-causal multi-token decode layers."
            )
        return cls(**_shared_mla_kwargs(specs), non_causal_multi_token_decode=any_flag)
