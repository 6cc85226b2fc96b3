# SPDX-License-Identifier: Apache-2.0
"""Decode-context-parallel helpers shared by the fork's drafters."""

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers


def refresh_draft_dcp_local_seq_lens(
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    num_reqs: int,
    dcp_size: int,
) -> torch.Tensor | None:
    """Recompute rank-local lengths from the draft's global seq_lens."""
    if dcp_size <= 1:
        return None
    return prepare_dcp_local_seq_lens(
        input_buffers.dcp_local_seq_lens,
        input_buffers.seq_lens,
        num_reqs,
        dcp_size,
        block_tables.cp_rank,
        block_tables.cp_interleave,
    )


class DcpLocalLenPreparer:
    """Owns the DCP geometry so callers only pass the request count."""

    def __init__(
        self,
        input_buffers: InputBuffers,
        block_tables: BlockTables,
        dcp_size: int,
    ) -> None:
        self.input_buffers = input_buffers
        self.block_tables = block_tables
        self.dcp_size = dcp_size

    def refresh(self, num_reqs: int) -> torch.Tensor | None:
        if self.dcp_size <= 1:
            return None
        return prepare_dcp_local_seq_lens(
            self.input_buffers.dcp_local_seq_lens,
            self.input_buffers.seq_lens,
            num_reqs,
            self.dcp_size,
            self.block_tables.cp_rank,
            self.block_tables.cp_interleave,
        )


@contextmanager
def draft_dcp_local_seq_lens(
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    num_reqs: int,
    dcp_size: int,
) -> Iterator[torch.Tensor | None]:
    """Yield freshly prepared rank-local lengths, zeroing the tail afterwards."""
    lens = None
    if dcp_size > 1:
        lens = prepare_dcp_local_seq_lens(
            input_buffers.dcp_local_seq_lens,
            input_buffers.seq_lens,
            num_reqs,
            dcp_size,
            block_tables.cp_rank,
            block_tables.cp_interleave,
        )
    try:
        yield lens
    finally:
        if lens is not None:
            input_buffers.dcp_local_seq_lens[num_reqs:].zero_()


def target_seq_lens(
    input_batch: InputBatch, num_reqs: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The target step's (global, rank-local) sequence lengths."""
    dcp = input_batch.dcp_local_seq_lens
    return input_batch.seq_lens[:num_reqs], (None if dcp is None else dcp[:num_reqs])
