"""Decode-context-parallel helpers shared by the MLA backend overrides."""

from __future__ import annotations

from typing import Tuple

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


def dcp_world() -> Tuple[int, int]:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return 1, 0
    return parallel.dcp_size, parallel.dcp_rank


def rank_local_lens(seq_lens: torch.Tensor, interleave_size: int = 1) -> torch.Tensor:
    """Lengths of this rank's interleaved slice (identity when DCP is off)."""
    size, rank = dcp_world()
    if size == 1:
        return seq_lens
    return get_dcp_lens(seq_lens, size, rank, interleave_size=interleave_size).to(
        torch.int32
    )


def kernel_lens(metadata, forward_batch) -> torch.Tensor:
    """int32 KV lengths for the MLA decode kernel, hoisted when available."""
    if metadata is not None and metadata.seq_lens_k is not None:
        return metadata.seq_lens_k[: forward_batch.batch_size]
    return forward_batch.seq_lens[: forward_batch.batch_size].to(torch.int32)


def per_row(t: torch.Tensor, q_len: int) -> torch.Tensor:
    """Request-major expansion: row r*q_len + j belongs to request r."""
    return t.repeat_interleave(q_len, dim=0)


def per_step(t: torch.Tensor, q_len: int) -> torch.Tensor:
    """Step-major expansion: row j*bs + r belongs to request r."""
    reps = (q_len,) + (1,) * (t.dim() - 1)
    return t.repeat(*reps)


def causal_row_bounds(total_kv_lens: torch.Tensor, q_len: int) -> torch.Tensor:
    """Global KV length each query row may attend to, request-major
    ([bs * q_len]); the last row of a request sees ``total_kv_lens``."""
    steps = torch.arange(
        1, q_len + 1, dtype=total_kv_lens.dtype, device=total_kv_lens.device
    )
    bounds = total_kv_lens.unsqueeze(1) - q_len + steps
    return bounds.clamp_(min=0).reshape(-1)
