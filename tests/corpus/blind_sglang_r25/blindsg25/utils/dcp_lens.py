"""Rank-local KV length helpers for decode context parallelism (DCP).

Under DCP each rank holds an interleaved slice of every request's KV cache;
kernels that walk this rank's page table need this rank's share of each
request's length, while the cute-dsl DCP kernel additionally wants the global
per-request length as its causal bound.
"""

from __future__ import annotations

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


def dcp_on() -> bool:
    return get_parallel().dcp_enabled


def rank_local_lens(seq_lens: torch.Tensor) -> torch.Tensor:
    """This rank's share of each request's KV length (int32)."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return seq_lens
    return get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank).to(torch.int32)


def rank_local_max_len(max_seq_len: int) -> int:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return max_seq_len
    local_max = max_seq_len // parallel.dcp_size + int(
        parallel.dcp_rank < max_seq_len % parallel.dcp_size
    )
    return max(local_max, 1)


def verify_kv_lens(seq_lens: torch.Tensor, num_draft_tokens: int) -> torch.Tensor:
    """Global KV length a target-verify row attends to (prefix + draft window)."""
    return (seq_lens + num_draft_tokens).to(torch.int32)


def host_decode_lens(forward_batch) -> torch.Tensor:
    """KV lengths for the decode kernel, preferring the host mirror when the
    scheduler published one (saves a D2H-ordered dependency on seq_lens)."""
    if forward_batch.seq_lens_cpu is not None:
        return forward_batch.seq_lens_cpu.to(
            forward_batch.seq_lens.device, non_blocking=True
        ).to(torch.int32)
    return rank_local_lens(forward_batch.seq_lens)
