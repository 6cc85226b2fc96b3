"""Small DCP length utilities used by the forked MLA backends."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


def rank_share(lens: torch.Tensor, interleave_size: int = 1) -> torch.Tensor:
    """This DCP rank's share of ``lens`` (identity when DCP is off)."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return lens
    return get_dcp_lens(
        lens, parallel.dcp_size, parallel.dcp_rank, interleave_size=interleave_size
    ).to(torch.int32)


def pad_rows(t: torch.Tensor, rows: int, value: int = 1) -> torch.Tensor:
    if t.shape[0] >= rows:
        return t
    return torch.cat([t, t.new_full((rows - t.shape[0],), value)])


@dataclass
class DcpKvLens:
    """Per-request KV lengths as the decode kernel sees them under DCP."""

    local: torch.Tensor
    global_: torch.Tensor

    @classmethod
    def for_rank(cls, seq_lens: torch.Tensor, interleave_size: int = 1) -> "DcpKvLens":
        global_ = seq_lens.to(torch.int32)
        return cls(local=rank_share(global_, interleave_size), global_=global_)

    @classmethod
    def unsharded(cls, seq_lens: torch.Tensor) -> "DcpKvLens":
        """Lengths for a replicated (non-DCP) KV cache."""
        global_ = seq_lens.to(torch.int32)
        return cls(local=global_, global_=global_)

    @staticmethod
    def max_local(max_seq_len: int) -> int:
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return max_seq_len
        return max(
            max_seq_len // parallel.dcp_size
            + int(parallel.dcp_rank < max_seq_len % parallel.dcp_size),
            1,
        )


@contextlib.contextmanager
def rank_local_seq_lens(forward_batch) -> Iterator[torch.Tensor]:
    """Temporarily expose this rank's share as ``forward_batch.seq_lens``.

    Used around helpers (page-table builders) that read the batch lengths
    directly.
    """
    saved = forward_batch.seq_lens
    forward_batch.seq_lens = rank_share(saved)
    try:
        yield forward_batch.seq_lens
    finally:
        forward_batch.seq_lens = saved


def iter_row_chunks(bs: int, chunk: int) -> Iterator[slice]:
    """Split a decode batch into launches of at most ``chunk`` requests."""
    chunk = max(chunk, 1)
    for start in range(0, bs, chunk):
        yield slice(start, min(start + chunk, bs))
