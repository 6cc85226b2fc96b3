"""Length helpers for DCP: rank-local views of whole-sequence lengths."""

from __future__ import annotations

from typing import Tuple

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.runtime_context import get_parallel


def local_lens(seq_lens: torch.Tensor) -> torch.Tensor:
    """This rank's share of each request's KV (identity without DCP)."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return seq_lens.to(torch.int32)
    return get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank).to(
        torch.int32
    )


def local_max(max_len: int) -> int:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return max_len
    local = max_len // parallel.dcp_size + int(
        parallel.dcp_rank < max_len % parallel.dcp_size
    )
    return max(local, 1)


def split_lens(global_lens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Return ``(local, global)`` int32 length tensors."""
    global_i32 = global_lens.to(torch.int32)
    return local_lens(global_i32), global_i32


def localize_plan_inputs(
    kv_lens: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    bs: int,
) -> int:
    """Shard a whole-sequence (lens, indptr, indices) triple to this rank in
    place and return the number of local ids; no-op without DCP."""
    if not get_parallel().dcp_enabled:
        return int(kv_indptr[bs].item())
    return plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
