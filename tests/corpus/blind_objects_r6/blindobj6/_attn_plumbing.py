# SPDX-License-Identifier: Apache-2.0
"""Attention-metadata plumbing shared by fork drafters (no speculator here)."""

from collections.abc import Mapping
from typing import Any

import torch

from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.input_batch import InputBuffers
from vllm.v1.worker.utils import AttentionGroup


def build_uniform_decode_metadata(
    attn_groups: list[list[AttentionGroup]],
    kv_cache_config: KVCacheConfig,
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    num_reqs: int,
    max_seq_len: int,
    seq_lens_cpu_upper_bound: torch.Tensor,
    causal: bool | Mapping[int, bool] = True,
) -> dict[str, Any]:
    """One-token-per-request decode metadata straight from the draft buffers."""
    query_start_loc_cpu = torch.arange(num_reqs + 1, dtype=torch.int32)
    return build_attn_metadata(
        attn_groups=attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_reqs,
        query_start_loc_gpu=input_buffers.query_start_loc[: num_reqs + 1],
        query_start_loc_cpu=query_start_loc_cpu,
        max_query_len=1,
        seq_lens=input_buffers.seq_lens[:num_reqs],
        max_seq_len=max_seq_len,
        block_tables=[x[:num_reqs] for x in block_tables.input_block_tables],
        slot_mappings=block_tables.slot_mappings[:, :num_reqs],
        kv_cache_config=kv_cache_config,
        seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound[:num_reqs],
        causal=causal,
    )
