# SPDX-License-Identifier: Apache-2.0
"""Shared helpers for the fork's draft workers.

Kept outside the speculator modules so the benchmark harness and the draft
workers can use the same code.
"""

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.utils import AttentionGroup


def eager_draft_metadata(
    attn_groups: list[list[AttentionGroup]],
    kv_cache_config: KVCacheConfig,
    block_tables: BlockTables,
    input_buffers: InputBuffers,
    num_reqs: int,
    query_start_loc_np: np.ndarray,
    seq_lens_cpu_upper_bound: torch.Tensor,
    max_seq_len: int,
    causal: bool | Mapping[int, bool] = True,
) -> dict[str, Any]:
    """Eager (never captured) attention metadata for a draft batch."""
    num_tokens = int(query_start_loc_np[num_reqs])
    query_start_loc_cpu = torch.from_numpy(query_start_loc_np[: num_reqs + 1])
    max_query_len = int(np.diff(query_start_loc_np[: num_reqs + 1]).max())
    return build_attn_metadata(
        attn_groups=attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_tokens,
        query_start_loc_gpu=input_buffers.query_start_loc[: num_reqs + 1],
        query_start_loc_cpu=query_start_loc_cpu,
        max_query_len=max_query_len,
        seq_lens=input_buffers.seq_lens[:num_reqs],
        max_seq_len=max_seq_len,
        block_tables=[x[:num_reqs] for x in block_tables.input_block_tables],
        slot_mappings=block_tables.slot_mappings[:, :num_tokens],
        kv_cache_config=kv_cache_config,
        seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound[:num_reqs],
        causal=causal,
    )


def capture_draft_metadata(
    attn_groups: list[list[AttentionGroup]],
    kv_cache_config: KVCacheConfig,
    block_tables: BlockTables,
    input_buffers: InputBuffers,
    num_reqs: int,
    num_tokens: int,
    max_model_len: int,
    causal: bool | Mapping[int, bool] = True,
) -> dict[str, Any]:
    """Dummy metadata for CUDA graph capture of a draft step."""
    input_batch = InputBatch.make_dummy(num_reqs, num_tokens, input_buffers)
    return build_attn_metadata(
        attn_groups=attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_tokens,
        query_start_loc_gpu=input_batch.query_start_loc,
        query_start_loc_cpu=torch.from_numpy(input_batch.query_start_loc_np),
        max_query_len=num_tokens // num_reqs,
        seq_lens=input_batch.seq_lens,
        max_seq_len=max_model_len,
        block_tables=block_tables.get_dummy_block_tables(num_reqs),
        slot_mappings=block_tables.get_dummy_slot_mappings(num_tokens),
        kv_cache_config=kv_cache_config,
        for_cudagraph_capture=True,
        causal=causal,
    )


def refresh_dcp_local_lens(
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    num_reqs: int,
) -> torch.Tensor | None:
    """Recompute this rank's share of the draft sequence lengths."""
    if block_tables.cp_size == 1:
        return None
    return prepare_dcp_local_seq_lens(
        input_buffers.dcp_local_seq_lens,
        input_buffers.seq_lens,
        num_reqs,
        block_tables.cp_size,
        block_tables.cp_rank,
        block_tables.cp_interleave,
    )


def target_local_lens_per_step(
    input_batch: InputBatch, num_steps: int
) -> Iterator[torch.Tensor | None]:
    """DCP-local lengths to use for each draft decode step (1..num_steps-1)."""
    for _ in range(1, num_steps):
        yield input_batch.dcp_local_seq_lens


def slice_block_tables(
    block_tables: BlockTables, num_reqs: int
) -> Sequence[torch.Tensor]:
    return [x[:num_reqs] for x in block_tables.input_block_tables]
