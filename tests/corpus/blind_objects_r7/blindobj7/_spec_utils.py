# SPDX-License-Identifier: Apache-2.0
"""Field plumbing shared by the fork's MLA KV-cache spec merges."""

from typing import Any

from vllm.v1.kv_cache_interface import MLAAttentionSpec

# Fields every layer of an MLA KV-cache group must agree on (causality flags
# are handled by each merge).
_MLA_UNIFORM_FIELDS = (
    "cache_dtype_str",
    "topk_buffer_width",
    "tokens_per_state",
    "model_version",
    "cache_role",
    "is_index_group_leader",
    "block_stride_alignment",
)


def check_uniform_mla_fields(specs: list[MLAAttentionSpec]) -> None:
    for name in _MLA_UNIFORM_FIELDS:
        values = {getattr(spec, name) for spec in specs}
        if len(values) != 1:
            raise ValueError(
                "All attention layers in the same KV cache group must agree on "
                f"{name}; got {values}."
            )


def merged_mla_fields(specs: list[MLAAttentionSpec]) -> dict[str, Any]:
    """Constructor kwargs of a merged MLA spec, without causality flags."""
    check_uniform_mla_fields(specs)
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
        cache_dtype_str=first.cache_dtype_str,
        topk_buffer_width=first.topk_buffer_width,
        tokens_per_state=first.tokens_per_state,
        model_version=first.model_version,
        cache_role=first.cache_role,
        is_index_group_leader=first.is_index_group_leader,
        block_stride_alignment=first.block_stride_alignment,
    )
