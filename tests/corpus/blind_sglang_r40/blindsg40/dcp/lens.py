"""Rank-local / global KV length helpers for the DCP ports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens

from blindsg40.config.settings import DcpSettings


def to_local(global_lens: torch.Tensor, dcp: DcpSettings) -> torch.Tensor:
    """This rank's share of each request's KV (identity when DCP is off)."""
    return get_dcp_lens(
        global_lens, dcp.size, dcp.rank, interleave_size=dcp.interleave
    ).to(torch.int32)


def local_max(max_seq_len: int, dcp: DcpSettings) -> int:
    if not dcp.enabled:
        return max_seq_len
    return max(max_seq_len // dcp.size + int(dcp.rank < max_seq_len % dcp.size), 1)


@dataclass(frozen=True)
class DcpLens:
    global_lens: torch.Tensor
    local_lens: torch.Tensor
    max_local: int

    @classmethod
    def from_global(cls, global_lens: torch.Tensor, max_seq_len: int, dcp: DcpSettings) -> "DcpLens":
        global_lens = global_lens.to(torch.int32)
        return cls(
            global_lens=global_lens,
            local_lens=to_local(global_lens, dcp),
            max_local=local_max(max_seq_len, dcp),
        )


def global_and_local(global_lens: torch.Tensor, dcp: DcpSettings) -> Tuple[torch.Tensor, torch.Tensor]:
    """Returns ``(global, local)``."""
    global_lens = global_lens.to(torch.int32)
    return global_lens, to_local(global_lens, dcp)


def int32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.int32 else t.to(torch.int32)
