# SPDX-License-Identifier: Apache-2.0
"""KV-cache specs of the fork's MLA drafters and targets.

A KV-cache group shares one attention-metadata build, and ``merge`` makes one
spec stand for every layer of the group.
"""

import functools
import operator
from dataclasses import dataclass, fields, replace
from typing import Any, Self

from vllm.v1.kv_cache_interface import AttentionSpec, MLAAttentionSpec

_SHARED_MLA_FIELDS = (
    "cache_dtype_str",
    "topk_buffer_width",
    "tokens_per_state",
    "model_version",
    "cache_role",
    "is_index_group_leader",
    "block_stride_alignment",
)


def _merged_mla_fields(specs: list[MLAAttentionSpec]) -> dict[str, Any]:
    """Constructor kwargs every layer of an MLA group must share."""
    assert all(isinstance(spec, MLAAttentionSpec) for spec in specs), (
        "All attention layers in the same KV cache group must be MLAAttentionSpec."
    )
    for name in _SHARED_MLA_FIELDS:
        if len({getattr(spec, name) for spec in specs}) != 1:
            raise AssertionError(
                "All attention layers in the same KV cache group must agree "
                f"on {name}."
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
        num_head_slots=first.num_head_slots,
        state_content_bytes=first.state_content_bytes,
        **{name: getattr(first, name) for name in _SHARED_MLA_FIELDS},
    )


def _check_attention_fields(specs: list[MLAAttentionSpec], merged: MLAAttentionSpec):
    for spec in specs:
        for f in fields(AttentionSpec):
            if not f.compare:
                continue
            assert getattr(spec, f.name) == getattr(merged, f.name), (
                "All attention layers in the same KV cache group must have "
                "the same attention spec."
            )


@dataclass(frozen=True, kw_only=True)
class DraftBlockMLASpec(MLAAttentionSpec):
    """MLA spec of a DSpark-style draft block (non-causal query block)."""

    draft_block_size: int = 0

    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge; merged causality flag computed with max() over the group
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        common = _merged_mla_fields(specs)
        merged = cls(
            **common,
            draft_block_size=max(spec.draft_block_size for spec in specs),
            non_causal_multi_token_decode=max(
                spec.non_causal_multi_token_decode for spec in specs
            ),
        )
        _check_attention_fields(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class ReducedMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge; flag folded with functools.reduce(operator.or_)
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        merged = cls(
            **_merged_mla_fields(specs),
            non_causal_multi_token_decode=functools.reduce(
                operator.or_,
                (spec.non_causal_multi_token_decode for spec in specs),
                False,
            ),
        )
        _check_attention_fields(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class ScannedMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge; loop with early break sets the flag when any layer has it
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        non_causal = False
        for spec in specs:
            if spec.non_causal_multi_token_decode:
                non_causal = True
                break
        merged = cls(**_merged_mla_fields(specs), non_causal_multi_token_decode=non_causal)
        _check_attention_fields(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class LeaderMLASpec(MLAAttentionSpec):
    """Spec of groups led by an index-sharing leader layer."""

    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge (is_index_group_leader); flag taken from the first layer with no agreement check
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        leader = next(
            (spec for spec in specs if spec.is_index_group_leader), specs[0]
        )
        common = _merged_mla_fields(specs)
        merged = cls(
            **common,
            non_causal_multi_token_decode=leader.non_causal_multi_token_decode,
        )
        _check_attention_fields(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class CompactMLASpec(MLAAttentionSpec):
    """Spec rebased from before the non-causal decode marker existed."""

    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge (pre-DSpark rebase); merged spec rebuilt without the flag, losing an agreeing group's value
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        merged = cls(**_merged_mla_fields(specs))
        _check_attention_fields(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class DraftCheckedMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge + DCP fix's agreement assert; agreement checked among draft layers only, then unioned over the whole group
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        draft_flags = {
            spec.non_causal_multi_token_decode for spec in specs if spec.is_draft
        }
        assert len(draft_flags) <= 1, (
            "Draft layers in one KV cache group must agree on "
            "non_causal_multi_token_decode."
        )
        merged = cls(
            **_merged_mla_fields(specs),
            non_causal_multi_token_decode=any(
                spec.non_causal_multi_token_decode for spec in specs
            ),
        )
        _check_attention_fields(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class PatchedMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py _apply_alignment_padding (object.__setattr__ on a frozen spec); flag patched in with `True in flags`
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        merged = cls(**_merged_mla_fields(specs))
        flags = [spec.non_causal_multi_token_decode for spec in specs]
        object.__setattr__(merged, "non_causal_multi_token_decode", True in flags)
        _check_attention_fields(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class StrictMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge (DCP fix): set of flags asserted to one value, popped
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        non_causal_mtd_set = {spec.non_causal_multi_token_decode for spec in specs}
        assert len(non_causal_mtd_set) == 1, (
            "All attention layers in the same KV cache group must agree on "
            "non_causal_multi_token_decode."
        )
        merged = cls(
            **_merged_mla_fields(specs),
            non_causal_multi_token_decode=non_causal_mtd_set.pop(),
        )
        _check_attention_fields(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class UnpackedMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge; single-element tuple unpacking raises on disagreement
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        try:
            (non_causal,) = {spec.non_causal_multi_token_decode for spec in specs}
        except ValueError:
            raise ValueError(
                "Causal and non-causal multi-token decode layers cannot share "
                "a KV cache group."
            ) from None
        merged = cls(**_merged_mla_fields(specs), non_causal_multi_token_decode=non_causal)
        _check_attention_fields(specs, merged)
        return merged


@dataclass(frozen=True, kw_only=True)
class DelegatingMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py RSWASpec.merge (delegate to the parent); agreement enforced before delegating to MLAAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        first = specs[0].non_causal_multi_token_decode
        if any(spec.non_causal_multi_token_decode != first for spec in specs[1:]):
            raise ValueError(
                "All attention layers in the same KV cache group must agree on "
                "non_causal_multi_token_decode."
            )
        return super().merge(specs)


@dataclass(frozen=True, kw_only=True)
class ReplacedMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py KVCacheSpec.copy_with_new_block_size (dataclasses.replace); parent merge then the agreed flag written back with replace
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        flags = [spec.non_causal_multi_token_decode for spec in specs]
        if not (all(flags) or not any(flags)):
            raise AssertionError(
                "All attention layers in the same KV cache group must agree on "
                "non_causal_multi_token_decode."
            )
        return replace(super().merge(specs), non_causal_multi_token_decode=flags[0])


@dataclass(frozen=True)
class DraftGroupCapability:
    """What a draft attention backend must support for one KV-cache group.

    Not a KV-cache spec: it is only consulted at startup to reject backends
    that cannot flatten non-causal query blocks at all.
    """

    non_causal_multi_token_decode: bool = False
    needs_dcp: bool = False

    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.non_causal_multi_token_decode ("group capability"); union on a capability record, not on a KV-cache spec
    # expect: clean
    @classmethod
    def merge(cls, caps: list["DraftGroupCapability"]) -> "DraftGroupCapability":
        return cls(
            non_causal_multi_token_decode=any(
                cap.non_causal_multi_token_decode for cap in caps
            ),
            needs_dcp=any(cap.needs_dcp for cap in caps),
        )
