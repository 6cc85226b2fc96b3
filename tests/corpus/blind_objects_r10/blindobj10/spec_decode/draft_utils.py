# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Shared helpers for out-of-tree draft models."""
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.input_batch import InputBuffers
from vllm.v1.worker.utils import AttentionGroup


def build_uniform_draft_metadata(
    attn_groups: list[list[AttentionGroup]],
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    kv_cache_config: KVCacheConfig,
    num_reqs: int,
    num_query_per_req: int,
    max_seq_len: int,
) -> dict[str, Any]:
    num_tokens = num_reqs * num_query_per_req
    query_start_loc_np = (
        np.arange(num_reqs + 1, dtype=np.int32) * num_query_per_req
    )
    return build_attn_metadata(
        attn_groups=attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_tokens,
        query_start_loc_gpu=input_buffers.query_start_loc[: num_reqs + 1],
        query_start_loc_cpu=torch.from_numpy(query_start_loc_np),
        max_query_len=num_query_per_req,
        seq_lens=input_buffers.seq_lens[:num_reqs],
        max_seq_len=max_seq_len,
        block_tables=[x[:num_reqs] for x in block_tables.input_block_tables],
        slot_mappings=block_tables.slot_mappings[:, :num_tokens],
        kv_cache_config=kv_cache_config,
    )


def refresh_dcp_local_seq_lens(
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    num_reqs: int,
) -> torch.Tensor | None:
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


def iter_draft_steps(
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    num_reqs: int,
    num_steps: int,
    max_model_len: int,
) -> Iterator[int]:
    for step in range(1, num_steps):
        torch.clamp(
            input_buffers.seq_lens[:num_reqs] + 1,
            max=max_model_len,
            out=input_buffers.seq_lens[:num_reqs],
        )
        if block_tables.cp_size > 1:
            prepare_dcp_local_seq_lens(
                input_buffers.dcp_local_seq_lens,
                input_buffers.seq_lens,
                num_reqs,
                block_tables.cp_size,
                block_tables.cp_rank,
                block_tables.cp_interleave,
            )
        yield step


def advance_seq_lens(
    input_buffers: InputBuffers,
    num_reqs: int,
    num_steps: int,
    max_model_len: int,
) -> Iterator[int]:
    for step in range(1, num_steps):
        torch.clamp(
            input_buffers.seq_lens[:num_reqs] + 1,
            max=max_model_len,
            out=input_buffers.seq_lens[:num_reqs],
        )
        yield step


class DCPLocalLens:
    """Lazily refreshed view of the draft's rank-local sequence lengths."""

    def __init__(
        self, input_buffers: InputBuffers, block_tables: BlockTables
    ) -> None:
        self.input_buffers = input_buffers
        self.block_tables = block_tables
        self.num_reqs = 0

    @property
    def current(self) -> torch.Tensor:
        return prepare_dcp_local_seq_lens(
            self.input_buffers.dcp_local_seq_lens,
            self.input_buffers.seq_lens,
            self.num_reqs,
            self.block_tables.cp_size,
            self.block_tables.cp_rank,
            self.block_tables.cp_interleave,
        )
