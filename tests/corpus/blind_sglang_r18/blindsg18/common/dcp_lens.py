"""Decode-context-parallel (DCP) length helpers.

Each DCP rank keeps a token-interleaved slice of every request's KV cache:
token ``t`` lives on rank ``t % dcp_size``. Kernels that walk this rank's
page table must see this rank's share of each length, not the request's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from sglang.srt.distributed.parallel_state import get_dcp_rank, get_dcp_world_size
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel, get_server_args


def dcp_world() -> tuple[int, int]:
    """(dcp_size, dcp_rank) of this process; (1, 0) when DCP is off."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return 1, 0
    return parallel.dcp_size, parallel.dcp_rank


def dcp_size_from_server_args() -> int:
    return int(getattr(get_server_args(), "dcp_size", 1) or 1)


def rank_local_lens(seq_lens: torch.Tensor) -> torch.Tensor:
    """This rank's share of each request's KV length (int32)."""
    world = get_dcp_world_size()
    if world <= 1:
        return seq_lens.to(torch.int32)
    return get_dcp_lens(seq_lens, world, get_dcp_rank()).to(torch.int32)


def kv_lens_for_verify(seq_lens: torch.Tensor, draft_token_num: int) -> torch.Tensor:
    """KV length a target-verify forward attends to, per request (whole sequence)."""
    return (seq_lens + draft_token_num).to(torch.int32)


def clamp_kv_lens(seq_lens: torch.Tensor, max_len: int) -> torch.Tensor:
    """Bound request lengths by the captured context length."""
    return torch.clamp(seq_lens, min=1, max=max_len).to(torch.int32)


@dataclass
class DcpLens:
    """Both views of one step's KV lengths."""

    local: torch.Tensor
    global_: torch.Tensor
    max_local: int

    @classmethod
    def from_seq_lens(
        cls, seq_lens: torch.Tensor, max_seq_len: Optional[int] = None
    ) -> "DcpLens":
        size, rank = dcp_world()
        global_lens = seq_lens.to(torch.int32)
        local = (
            get_dcp_lens(global_lens, size, rank).to(torch.int32)
            if size > 1
            else global_lens
        )
        if max_seq_len is None:
            max_local = int(local.max().item()) if local.numel() else 1
        else:
            max_local = max(max_seq_len // size + int(rank < max_seq_len % size), 1)
        return cls(local=local, global_=global_lens, max_local=max_local)


class StepLensCache:
    """Per-step cache of the lengths the decode launch reads, refreshed once
    per forward by the backend's metadata init."""

    def __init__(self):
        self.seq_lens: Optional[torch.Tensor] = None
        self.causal_seqs: Optional[torch.Tensor] = None

    def update(
        self, seq_lens: torch.Tensor, causal_seqs: Optional[torch.Tensor] = None
    ) -> None:
        self.seq_lens = seq_lens.to(torch.int32)
        self.causal_seqs = (
            causal_seqs.to(torch.int32) if causal_seqs is not None else None
        )
