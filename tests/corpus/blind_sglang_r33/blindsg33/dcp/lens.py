"""Length helpers shared by the DCP MLA ports."""

from __future__ import annotations

from typing import NamedTuple, Tuple

import torch

from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


class DcpLens(NamedTuple):
    """Per-request KV lengths for one DCP rank."""

    local: torch.Tensor
    global_: torch.Tensor


def dcp_world() -> Tuple[int, int]:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return 1, 0
    return parallel.dcp_size, parallel.dcp_rank


def split_dcp_lens(seq_lens: torch.Tensor) -> DcpLens:
    global_lens = seq_lens.to(torch.int32)
    size, rank = dcp_world()
    if size == 1:
        return DcpLens(global_lens, global_lens)
    return DcpLens(get_dcp_lens(global_lens, size, rank).to(torch.int32), global_lens)


def kernel_lens(
    seq_lens: torch.Tensor, dcp_size: int = 1, dcp_rank: int = 0
) -> torch.Tensor:
    """int32 KV lengths as the decode kernels want them."""
    return get_dcp_lens(seq_lens, dcp_size, dcp_rank).to(torch.int32)


def local_max_len(max_len: int) -> int:
    size, rank = dcp_world()
    if size == 1:
        return max_len
    return max(max_len // size + int(rank < max_len % size), 1)
