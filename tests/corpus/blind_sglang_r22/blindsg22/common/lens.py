"""KV-length helpers for the MLA backends under decode context parallelism.

Under DCP every rank holds an interleaved slice of each request's KV cache;
the decode kernel must walk only this rank's share (``get_dcp_lens``), while a
multi-token query additionally needs the global causal bound.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Iterator, Tuple

import torch

from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

# Rank-local and whole-sequence lengths of one forward.
DcpLens = namedtuple("DcpLens", ["local", "global_"])


def split_dcp_lens(seq_lens: torch.Tensor) -> DcpLens:
    """Return (rank-local, global) int32 lengths for ``seq_lens``."""
    parallel = get_parallel()
    global_lens = seq_lens.to(torch.int32)
    if not parallel.dcp_enabled:
        return DcpLens(global_lens, global_lens)
    local_lens = get_dcp_lens(global_lens, parallel.dcp_size, parallel.dcp_rank).to(
        torch.int32
    )
    return DcpLens(local_lens, global_lens)


def iter_layer_lens(
    seq_lens: torch.Tensor, num_layers: int, localize: bool
) -> Iterator[Tuple[int, torch.Tensor]]:
    """Yield the lengths each layer's launch should use."""
    parallel = get_parallel()
    lens = seq_lens.to(torch.int32)
    if localize and parallel.dcp_enabled:
        lens = get_dcp_lens(lens, parallel.dcp_size, parallel.dcp_rank).to(
            torch.int32
        )
    for layer_idx in range(num_layers):
        yield layer_idx, lens
