"""Length helpers for decode context parallel (DCP) MLA paths."""

from __future__ import annotations

import torch

from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


def rank_local_lens(global_lens: torch.Tensor) -> torch.Tensor:
    """This rank's share of each request's KV under DCP (identity without)."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return global_lens
    return get_dcp_lens(global_lens, parallel.dcp_size, parallel.dcp_rank).to(
        torch.int32
    )


def as_kernel_lens(seq_lens: torch.Tensor) -> torch.Tensor:
    """int32 view the trtllm-gen / cute-dsl kernels want."""
    return seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32)


def local_max_len(max_seq_len: int) -> int:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return max_seq_len
    local = max_seq_len // parallel.dcp_size + int(
        parallel.dcp_rank < max_seq_len % parallel.dcp_size
    )
    return max(local, 1)
