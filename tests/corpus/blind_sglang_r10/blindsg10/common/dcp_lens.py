"""Rank-local / global KV length bookkeeping for decode context parallelism."""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


@dataclasses.dataclass(frozen=True)
class DcpDecodeLens:
    """Lengths one DCP rank needs for an MLA decode launch."""

    local: torch.Tensor  # this rank's share of each request, int32
    global_: torch.Tensor  # whole-sequence lengths (causal bound), int32
    max_local: int


def rank_local_lens(seq_lens: torch.Tensor) -> torch.Tensor:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return seq_lens.to(torch.int32)
    return get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank).to(
        torch.int32
    )


def rank_local_max(max_seq_len: int) -> int:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return max_seq_len
    local = max_seq_len // parallel.dcp_size + int(
        parallel.dcp_rank < max_seq_len % parallel.dcp_size
    )
    return max(local, 1)


def build_dcp_decode_lens(
    global_seq_lens: torch.Tensor, max_seq_len: Optional[int]
) -> DcpDecodeLens:
    global_i32 = global_seq_lens.to(torch.int32)
    return DcpDecodeLens(
        local=rank_local_lens(global_i32),
        global_=global_i32,
        max_local=rank_local_max(max_seq_len or 1),
    )
