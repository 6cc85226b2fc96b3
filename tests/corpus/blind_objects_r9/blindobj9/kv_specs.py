# SPDX-License-Identifier: Apache-2.0
"""Fork KV-cache specs for DSpark draft layers sharing the target's group."""
import functools
import operator
from dataclasses import dataclass, replace
from typing import Self

from vllm.v1.kv_cache_interface import MLAAttentionSpec


@dataclass(frozen=True, kw_only=True)
class DraftMLASpec(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        base = specs[0]
        flag = functools.reduce(
            operator.or_, (s.non_causal_multi_token_decode for s in specs), False
        )
        return replace(base, non_causal_multi_token_decode=flag)


@dataclass(frozen=True, kw_only=True)
class DraftMLASpecLoop(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        merged = specs[0]
        for spec in specs[1:]:
            if spec.non_causal_multi_token_decode:
                object.__setattr__(merged, "non_causal_multi_token_decode", True)
        return merged


@dataclass(frozen=True, kw_only=True)
class DraftMLASpecSuper(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        assert len({s.block_size for s in specs}) == 1
        return super().merge(specs)


@dataclass(frozen=True, kw_only=True)
class DraftMLASpecDropped(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: SG201
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        flags = {s.non_causal_multi_token_decode for s in specs}
        if len(flags) != 1:
            raise ValueError("KV cache group mixes causal and non-causal layers")
        first = specs[0]
        return cls(
            block_size=first.block_size,
            num_kv_heads=first.num_kv_heads,
            head_size=first.head_size,
            dtype=first.dtype,
            cache_dtype_str=first.cache_dtype_str,
        )


@dataclass(frozen=True, kw_only=True)
class DraftMLASpecStrict(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        flags = {s.non_causal_multi_token_decode for s in specs}
        if len(flags) != 1:
            raise ValueError("KV cache group mixes causal and non-causal layers")
        first = specs[0]
        return cls(
            block_size=first.block_size,
            num_kv_heads=first.num_kv_heads,
            head_size=first.head_size,
            dtype=first.dtype,
            cache_dtype_str=first.cache_dtype_str,
            non_causal_multi_token_decode=flags.pop(),
        )


@dataclass(frozen=True, kw_only=True)
class DraftMLASpecAssert(MLAAttentionSpec):
    # idiom: vllm/v1/kv_cache_interface.py MLAAttentionSpec.merge
    # expect: clean
    @classmethod
    def merge(cls, specs: list[Self]) -> Self:
        base = specs[0]
        for spec in specs[1:]:
            assert (
                spec.non_causal_multi_token_decode == base.non_causal_multi_token_decode
            ), "All attention layers in a KV cache group must agree on causality."
        return replace(
            base, non_causal_multi_token_decode=base.non_causal_multi_token_decode
        )
