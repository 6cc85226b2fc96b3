# SPDX-License-Identifier: Apache-2.0
"""Decode-context-parallel helpers."""

from __future__ import annotations

import torch

from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.input_batch import InputBuffers


def _local_lens_into(
    out: torch.Tensor,
    seq_lens: torch.Tensor,
    num_reqs: int,
    dcp_size: int,
    block_tables: BlockTables,
) -> torch.Tensor | None:
    return prepare_dcp_local_seq_lens(
        out,
        seq_lens,
        num_reqs,
        dcp_size,
        block_tables.cp_rank,
        block_tables.cp_interleave,
    )


def refresh_draft_local_lens(
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    num_reqs: int,
    dcp_size: int,
) -> torch.Tensor | None:
    if dcp_size <= 1:
        return None
    return _local_lens_into(
        input_buffers.dcp_local_seq_lens,
        input_buffers.seq_lens,
        num_reqs,
        dcp_size,
        block_tables,
    )


def local_lens_view(input_buffers: InputBuffers, num_reqs: int) -> torch.Tensor:
    return input_buffers.dcp_local_seq_lens[:num_reqs]


def describe_dcp_layout(block_tables: BlockTables) -> str:
    return (
        f"cp_size={block_tables.cp_size} cp_rank={block_tables.cp_rank} "
        f"cp_interleave={block_tables.cp_interleave}"
    )
