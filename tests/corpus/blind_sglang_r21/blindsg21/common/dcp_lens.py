"""Decode-context-parallel length helpers shared by the fork's MLA backends.

Under DCP every rank keeps an interleaved slice of each request's KV cache, so
the lengths a rank decodes with are its share of the sequence, while the
global length is only a causal bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sglang.srt.layers.dcp.layout import get_dcp_chain_spec_lens, get_dcp_lens
from sglang.srt.runtime_context import get_parallel


def rank_local_lens(lens: torch.Tensor) -> torch.Tensor:
    """This DCP rank's share of ``lens`` (int32); identity without DCP."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return lens
    return get_dcp_lens(lens, parallel.dcp_size, parallel.dcp_rank).to(torch.int32)


def cp_local_lens(lens: torch.Tensor) -> torch.Tensor:
    """Share of ``lens`` owned by this context-parallel rank.

    Ported from the prefill-CP MLA path, where the KV is split across the
    attention CP group.
    """
    parallel = get_parallel()
    if parallel.attn_cp_size == 1:
        return lens
    return get_dcp_lens(lens, parallel.attn_cp_size, parallel.attn_cp_rank).to(
        torch.int32
    )


def split_global_and_local(lens: torch.Tensor):
    """Return ``(global_lens, local_lens)``, both int32."""
    global_lens = lens if lens.dtype == torch.int32 else lens.to(torch.int32)
    return global_lens, rank_local_lens(global_lens)


@dataclass
class DcpLens:
    """The two length views a DCP MLA decode launch needs."""

    global_lens: torch.Tensor
    local_lens: torch.Tensor

    @classmethod
    def of(cls, lens: torch.Tensor) -> "DcpLens":
        global_lens, local_lens = split_global_and_local(lens)
        return cls(global_lens=global_lens, local_lens=local_lens)

    @property
    def kernel_lens(self) -> torch.Tensor:
        # What the kernel walks through this rank's page table.
        return self.local_lens

    @property
    def causal_bound(self) -> torch.Tensor:
        return self.global_lens


def chain_token_frontiers(total_kv_lens: torch.Tensor, tokens_per_req: int):
    """Rank-local KV frontier of every token of a chain verify window,
    request-major, shape ``(bs * tokens_per_req,)``."""
    parallel = get_parallel()
    dcp_size = parallel.dcp_size if parallel.dcp_enabled else 1
    dcp_rank = parallel.dcp_rank if parallel.dcp_enabled else 0
    return get_dcp_chain_spec_lens(total_kv_lens, tokens_per_req, dcp_size, dcp_rank)
