"""Length helpers for this fork's DCP MLA decode paths."""

from __future__ import annotations

import enum

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


class LenSource(enum.Enum):
    WHOLE = "whole"
    RANK_SHARD = "rank_shard"


def rank_kv_lens(seq_lens: torch.Tensor) -> torch.Tensor:
    """Kernel-ready KV lengths (int32)."""
    return seq_lens.to(torch.int32)


def shard_kv_lens(seq_lens: torch.Tensor) -> torch.Tensor:
    """This DCP rank's KV lengths (int32); identity when DCP is off."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return seq_lens.to(torch.int32)
    return get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank).to(torch.int32)


def lens_for(source: LenSource, seq_lens: torch.Tensor) -> torch.Tensor:
    if source is LenSource.RANK_SHARD:
        return shard_kv_lens(seq_lens)
    return seq_lens.to(torch.int32)


def dcp_world() -> tuple[int, int]:
    parallel = get_parallel()
    return parallel.dcp_size, parallel.dcp_rank
