# SPDX-License-Identifier: Apache-2.0
"""Attention-group utilities used by the draft runners."""

from __future__ import annotations

from typing import Any

from vllm.config import VllmConfig
from vllm.v1.attention.backend import AttentionCGSupport, CommonAttentionMetadata
from vllm.v1.worker.utils import AttentionGroup


def _build_group_for_drafting(
    group: AttentionGroup, common_attn_metadata: CommonAttentionMetadata, step: int
) -> Any:
    return group.build_metadata_for_drafting(common_attn_metadata, step)


def build_groups_for_drafting(
    attn_groups: list[list[AttentionGroup]],
    common_attn_metadata: CommonAttentionMetadata,
    step: int,
) -> dict[str, Any]:
    attn_metadata: dict[str, Any] = {}
    for groups in attn_groups:
        for group in groups:
            metadata = _build_group_for_drafting(group, common_attn_metadata, step)
            for layer_name in group.layer_names:
                attn_metadata[layer_name] = metadata
    return attn_metadata


def weakest_cg_support(
    attn_groups: list[list[AttentionGroup]], vllm_config: VllmConfig
) -> AttentionCGSupport:
    weakest = AttentionCGSupport.ALWAYS
    for groups in attn_groups:
        for group in groups:
            builder = group.get_metadata_builder()
            support = builder.get_cudagraph_support(vllm_config, group.kv_cache_spec)
            if support.value < weakest.value:
                weakest = support
    return weakest


def layer_names_by_group(attn_groups: list[list[AttentionGroup]]) -> dict[int, list[str]]:
    names: dict[int, list[str]] = {}
    for groups in attn_groups:
        for group in groups:
            names.setdefault(group.kv_cache_group_id, []).extend(group.layer_names)
    return names
