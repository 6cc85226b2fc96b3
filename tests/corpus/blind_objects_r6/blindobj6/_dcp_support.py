# SPDX-License-Identifier: Apache-2.0
"""Decode-context-parallel helpers used by the fork's drafters.

Written for the fork's DSpark+DCP bring-up, before upstream moved the
rank-local length recompute into ``DraftModelSpeculator._build_attn_metadata``.
"""

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.input_batch import InputBuffers


def recompute_draft_local_lens(
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    num_reqs: int,
    dcp_size: int,
) -> torch.Tensor | None:
    """Rank-local lengths from the draft's current global ``seq_lens``."""
    return prepare_dcp_local_seq_lens(
        input_buffers.dcp_local_seq_lens,
        input_buffers.seq_lens,
        num_reqs,
        dcp_size,
        block_tables.cp_rank,
        block_tables.cp_interleave,
    )


def snapshot_lens(input_buffers: InputBuffers) -> tuple[torch.Tensor, torch.Tensor]:
    """(global, rank-local) sequence-length buffers, for logging and replay."""
    return input_buffers.seq_lens, input_buffers.dcp_local_seq_lens


class DcpLensView:
    """Read-side view of a drafter's DCP lengths."""

    def __init__(
        self, input_buffers: InputBuffers, block_tables: BlockTables, dcp_size: int
    ):
        self.input_buffers = input_buffers
        self.block_tables = block_tables
        self.dcp_size = dcp_size
        self.num_reqs = 0

    @property
    def buffer(self) -> torch.Tensor:
        return self.input_buffers.dcp_local_seq_lens

    @property
    def local_seq_lens(self) -> torch.Tensor | None:
        if self.dcp_size == 1:
            return None
        return prepare_dcp_local_seq_lens(
            self.input_buffers.dcp_local_seq_lens,
            self.input_buffers.seq_lens,
            self.num_reqs,
            self.dcp_size,
            self.block_tables.cp_rank,
            self.block_tables.cp_interleave,
        )


class DcpLensTracker:
    """Keeps a drafter's rank-local lengths in step with its global ones."""

    def __init__(self, input_buffers: InputBuffers, block_tables: BlockTables):
        self.input_buffers = input_buffers
        self.block_tables = block_tables

    def refresh(self, num_reqs: int) -> torch.Tensor | None:
        return prepare_dcp_local_seq_lens(
            self.input_buffers.dcp_local_seq_lens,
            self.input_buffers.seq_lens,
            num_reqs,
            self.block_tables.cp_size,
            self.block_tables.cp_rank,
            self.block_tables.cp_interleave,
        )

    def reset(self, num_reqs: int) -> None:
        # Zero the padded tail so a replayed graph never reads stale lengths.
        self.input_buffers.dcp_local_seq_lens[num_reqs:].zero_()


def iter_dcp_local_lens(
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    num_reqs: int,
    num_steps: int,
) -> Iterator[torch.Tensor | None]:
    """One fresh set of rank-local lengths per draft step."""
    for _ in range(num_steps):
        yield prepare_dcp_local_seq_lens(
            input_buffers.dcp_local_seq_lens,
            input_buffers.seq_lens,
            num_reqs,
            block_tables.cp_size,
            block_tables.cp_rank,
            block_tables.cp_interleave,
        )


def iter_decode_steps(num_speculative_steps: int) -> Iterator[int]:
    """Draft decode steps after the prefill step."""
    yield from range(1, num_speculative_steps)


@contextmanager
def dcp_local_lens_scope(
    input_buffers: InputBuffers, block_tables: BlockTables, num_reqs: int
) -> Iterator[torch.Tensor | None]:
    """Recompute rank-local lengths for the body, zero the padded tail after."""
    if block_tables.cp_size == 1:
        yield None
        return
    lens = prepare_dcp_local_seq_lens(
        input_buffers.dcp_local_seq_lens,
        input_buffers.seq_lens,
        num_reqs,
        block_tables.cp_size,
        block_tables.cp_rank,
        block_tables.cp_interleave,
    )
    try:
        yield lens
    finally:
        input_buffers.dcp_local_seq_lens[num_reqs:].zero_()


class DcpRefreshMixin:
    """Mixin for drafters that refresh DCP lengths between draft steps."""

    input_buffers: InputBuffers
    block_tables: BlockTables
    dcp_size: int

    def _refresh_draft_local_lens(self, num_reqs: int) -> torch.Tensor | None:
        if self.dcp_size == 1:
            return None
        return prepare_dcp_local_seq_lens(
            self.input_buffers.dcp_local_seq_lens,
            self.input_buffers.seq_lens,
            num_reqs,
            self.dcp_size,
            self.block_tables.cp_rank,
            self.block_tables.cp_interleave,
        )

    def _log_draft_local_lens(self, num_reqs: int) -> list[int]:
        return self.input_buffers.dcp_local_seq_lens[:num_reqs].tolist()
