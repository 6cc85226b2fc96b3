# SPDX-License-Identifier: Apache-2.0
"""DCP helpers shared by the fork's drafters, model states and tools."""

from dataclasses import dataclass

import torch

from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.input_batch import InputBuffers


def refresh_dcp_local_seq_lens(
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    num_reqs: int,
    num_reqs_padded: int | None = None,
) -> torch.Tensor | None:
    """Recompute rank-local lengths from ``input_buffers.seq_lens``.

    Returns None when decode context parallelism is off.
    """
    if block_tables.cp_size == 1:
        return None
    return prepare_dcp_local_seq_lens(
        input_buffers.dcp_local_seq_lens,
        input_buffers.seq_lens,
        num_reqs,
        block_tables.cp_size,
        block_tables.cp_rank,
        block_tables.cp_interleave,
        num_reqs_padded=num_reqs_padded,
    )


@dataclass
class DCPLocalLens:
    """Lazily recomputed rank-local lengths for one batch of a buffer set."""

    input_buffers: InputBuffers
    block_tables: BlockTables
    num_reqs: int = 0

    def bind(self, num_reqs: int) -> "DCPLocalLens":
        self.num_reqs = num_reqs
        return self

    @property
    def local_seq_lens(self) -> torch.Tensor | None:
        return refresh_dcp_local_seq_lens(
            self.input_buffers, self.block_tables, self.num_reqs
        )


class DCPRefreshMixin:
    """Gives a runner component a one-call DCP length refresh."""

    input_buffers: InputBuffers
    block_tables: BlockTables

    def _refresh_local_lens(self, num_reqs: int) -> torch.Tensor | None:
        return refresh_dcp_local_seq_lens(
            self.input_buffers, self.block_tables, num_reqs
        )
