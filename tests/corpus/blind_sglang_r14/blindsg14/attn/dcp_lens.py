"""Length helpers for decode context parallelism (DCP).

Under DCP each rank holds an interleaved slice of every request's KV cache
(token t lives on rank ``t % dcp_size``).  Kernels walking this rank's page
table must be given this rank's share of each length; the whole-sequence
length is only meaningful as a causal bound.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Optional, Tuple

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


def rank_local_lens(lens: torch.Tensor) -> torch.Tensor:
    """This rank's share of each length (identity when DCP is off)."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return lens.to(torch.int32)
    return get_dcp_lens(lens, parallel.dcp_size, parallel.dcp_rank).to(torch.int32)


def rank_local_max(max_len: int) -> int:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return max_len
    local = max_len // parallel.dcp_size + int(
        parallel.dcp_rank < max_len % parallel.dcp_size
    )
    return max(local, 1)


def verify_kv_lens(seq_lens: torch.Tensor, num_draft_tokens: int) -> torch.Tensor:
    """Whole-sequence KV length seen by the last verify token."""
    return (seq_lens + num_draft_tokens).to(torch.int32)


def as_kernel_lens(lens: torch.Tensor) -> torch.Tensor:
    """dtype/contiguity normalization only; does not change what ``lens`` counts."""
    lens = lens if lens.dtype == torch.int32 else lens.to(torch.int32)
    return lens.contiguous()


@dataclasses.dataclass
class DcpDecodeLens:
    """Lengths for one DCP decode launch."""

    local: torch.Tensor
    causal_global: torch.Tensor
    max_local: int

    @classmethod
    def from_global(cls, global_lens: torch.Tensor, max_global: int) -> "DcpDecodeLens":
        return cls(
            local=rank_local_lens(global_lens),
            causal_global=as_kernel_lens(global_lens),
            max_local=rank_local_max(max_global),
        )


def iter_row_chunks(
    lens: torch.Tensor, chunk: int
) -> Iterator[Tuple[int, int, torch.Tensor]]:
    """Yield (start, end, lens[start:end]) over the batch rows."""
    bs = lens.shape[0]
    for start in range(0, bs, chunk):
        end = min(start + chunk, bs)
        yield start, end, lens[start:end]


def iter_local_row_chunks(
    lens: torch.Tensor, chunk: int
) -> Iterator[Tuple[int, int, torch.Tensor]]:
    """Like iter_row_chunks, but yields this rank's share of each length."""
    local = rank_local_lens(lens)
    for start, end, _ in iter_row_chunks(lens, chunk):
        yield start, end, local[start:end]
