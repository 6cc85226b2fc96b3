"""Small carriers for KV lengths.

Under DCP every rank holds an interleaved share of each request's KV. The
carriers below keep the global lengths and (where they compute it) this
rank's share side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


def local_lens(seq_lens: torch.Tensor) -> torch.Tensor:
    """This rank's share of ``seq_lens`` (identity when DCP is off)."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return seq_lens.to(torch.int32)
    return get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank).to(
        torch.int32
    )


def local_max_len(max_seq_len: int) -> int:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return max_seq_len
    return max(
        max_seq_len // parallel.dcp_size
        + int(parallel.dcp_rank < max_seq_len % parallel.dcp_size),
        1,
    )


def int32_lens(seq_lens: torch.Tensor) -> torch.Tensor:
    """dtype fix-up only: the kernels want int32 lengths."""
    return seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32)


@dataclass
class RankLens:
    """Global lengths plus this rank's share."""

    global_lens: torch.Tensor
    local: torch.Tensor = field(repr=False)

    @classmethod
    def from_global(cls, seq_lens: torch.Tensor) -> "RankLens":
        return cls(global_lens=int32_lens(seq_lens), local=local_lens(seq_lens))

    @property
    def kernel(self) -> torch.Tensor:
        return self.local

    @property
    def causal(self) -> torch.Tensor:
        return self.global_lens


class LensView:
    """Lengths as the non-DCP kernels consumed them (pre-port helper)."""

    def __init__(self, seq_lens: torch.Tensor, extra: int = 0):
        self.raw = seq_lens
        self.kernel_lens = int32_lens(seq_lens + extra if extra else seq_lens)
        self.causal_lens: Optional[torch.Tensor] = None

    @property
    def max_len_hint(self) -> int:
        return int(self.kernel_lens.max().item()) if self.kernel_lens.numel() else 0
