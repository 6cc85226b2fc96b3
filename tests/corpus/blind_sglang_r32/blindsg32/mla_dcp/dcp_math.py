"""DCP length math for the forked MLA backends.

Under DCP each rank holds the positions ``p`` with ``p % dcp_size ==
dcp_rank`` of every request, so a request of length ``L`` has
``L // N + (rank < L % N)`` tokens on this rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


@dataclass(frozen=True)
class DcpShard:
    size: int
    rank: int

    @property
    def enabled(self) -> bool:
        return self.size > 1

    @classmethod
    def current(cls) -> "DcpShard":
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return cls(1, 0)
        return cls(parallel.dcp_size, parallel.dcp_rank)

    @classmethod
    def off(cls) -> "DcpShard":
        return cls(1, 0)

    def localize(self, lens: torch.Tensor, start: Optional[torch.Tensor] = None) -> torch.Tensor:
        if not self.enabled:
            return lens.to(torch.int32)
        return get_dcp_lens(lens, self.size, self.rank, start=start).to(torch.int32)

    def local_max(self, max_len: int) -> int:
        if not self.enabled:
            return max_len
        return max(max_len // self.size + int(self.rank < max_len % self.size), 1)


@dataclass
class KvLens:
    """Per-request KV lengths as seen by this rank and by the whole group."""

    local: torch.Tensor
    global_: torch.Tensor
    max_local: int

    @classmethod
    def of(cls, seq_lens: torch.Tensor, max_len: int, shard: Optional[DcpShard] = None) -> "KvLens":
        shard = shard or DcpShard.current()
        glob = seq_lens.to(torch.int32)
        return cls(local=shard.localize(glob), global_=glob, max_local=shard.local_max(max_len))


def split_kv_lens(seq_lens: torch.Tensor, shard: Optional[DcpShard] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Return ``(global_lens, local_lens)`` as int32."""
    shard = shard or DcpShard.current()
    glob = seq_lens.to(torch.int32)
    return glob, shard.localize(glob)


def rank_view_lens(seq_lens: torch.Tensor, shard: DcpShard) -> torch.Tensor:
    """Lengths for the per-rank view of the batch."""
    if shard.rank == 0:
        # Rank 0 keeps the unsharded view (it drives the prefix-sum planner
        # and the metrics exporter).
        return seq_lens.to(torch.int32)
    return shard.localize(seq_lens)


def local_chunk_lens(
    chunk_starts: torch.Tensor, chunk_lens: torch.Tensor, shard: Optional[DcpShard] = None
) -> torch.Tensor:
    """This rank's share of each prefix chunk ``[start, start + len)``."""
    shard = shard or DcpShard.current()
    return shard.localize(chunk_lens, start=chunk_starts)


def cu_lens(lens: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.pad(torch.cumsum(lens, dim=0, dtype=torch.int32), (1, 0))
