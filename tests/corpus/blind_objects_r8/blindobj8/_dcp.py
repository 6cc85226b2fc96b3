# SPDX-License-Identifier: Apache-2.0
"""Decode-context-parallel helpers shared by the fork's runner code.

Nothing here knows about speculators: these are thin wrappers that pair an
``InputBuffers`` instance with the DCP geometry of a ``BlockTables``.
"""

from collections.abc import Iterator

import torch

from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.input_batch import InputBuffers


def refresh_rank_local_lens(
    buffers: InputBuffers,
    block_tables: BlockTables,
    num_reqs: int,
    dcp_size: int,
    num_reqs_padded: int | None = None,
) -> torch.Tensor | None:
    """Recompute ``buffers.dcp_local_seq_lens`` from ``buffers.seq_lens``.

    Returns the padded view of the rank-local lengths, or None without DCP.
    """
    if dcp_size <= 1:
        return None
    return prepare_dcp_local_seq_lens(
        buffers.dcp_local_seq_lens,
        buffers.seq_lens,
        num_reqs,
        dcp_size,
        block_tables.cp_rank,
        block_tables.cp_interleave,
        num_reqs_padded=num_reqs_padded,
    )


def iter_rank_local_lens(
    buffers: InputBuffers,
    block_tables: BlockTables,
    dcp_size: int,
    num_reqs: int,
    steps: range,
) -> Iterator[tuple[int, torch.Tensor | None]]:
    """Yield ``(step, lens)`` with the rank-local lengths refreshed each step.

    The caller advances ``buffers.seq_lens`` between iterations.
    """
    for step in steps:
        yield step, refresh_rank_local_lens(buffers, block_tables, num_reqs, dcp_size)


class RankLocalLens:
    """Holder pairing a seq_lens buffer with its DCP rank-local view."""

    def __init__(
        self, buffers: InputBuffers, block_tables: BlockTables, dcp_size: int
    ) -> None:
        self.buffers = buffers
        self.block_tables = block_tables
        self.dcp_size = dcp_size
        self.num_reqs = 0

    @property
    def enabled(self) -> bool:
        return self.dcp_size > 1

    def bind(self, num_reqs: int) -> "RankLocalLens":
        self.num_reqs = num_reqs
        return self

    def refresh(self, num_reqs: int | None = None) -> torch.Tensor | None:
        if num_reqs is None:
            num_reqs = self.num_reqs
        return refresh_rank_local_lens(
            self.buffers, self.block_tables, num_reqs, self.dcp_size
        )

    @property
    def fresh(self) -> torch.Tensor | None:
        """Rank-local lengths recomputed for the bound request count."""
        return self.refresh()

    @property
    def last(self) -> torch.Tensor:
        """Whatever the buffer holds now, without recomputing."""
        return self.buffers.dcp_local_seq_lens
