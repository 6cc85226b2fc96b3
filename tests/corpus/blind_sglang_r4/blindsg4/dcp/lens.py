"""Length helpers for the fork's DCP MLA decode paths."""

from __future__ import annotations

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


def rank_local_lens(seq_lens: torch.Tensor) -> torch.Tensor:
    """This DCP rank's share of each request's KV length (int32)."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return seq_lens.to(torch.int32)
    return get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank).to(
        torch.int32
    )


def kernel_lens(seq_lens: torch.Tensor, extra: int = 0) -> torch.Tensor:
    """int32 KV lengths in the layout the trtllm-gen kernels expect."""
    lens = seq_lens if extra == 0 else seq_lens + extra
    return lens if lens.dtype == torch.int32 else lens.to(torch.int32)


def local_max_len(max_seq_len: int) -> int:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return max_seq_len
    local = max_seq_len // parallel.dcp_size + int(
        parallel.dcp_rank < max_seq_len % parallel.dcp_size
    )
    return max(local, 1)
