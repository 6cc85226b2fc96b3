"""Decode-context-parallel length helpers used by the forked MLA backends.

A rank under DCP holds positions ``r, r + N, ...`` of every request; kernels
that read this rank's compact page table need the rank-local KV lengths.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

import torch

from sglang.kernels.ops.attention.dcp_kernels import create_mla_kv_page_table_for_dcp
from sglang.kernels.ops.attention.kv_indices import (
    get_num_kv_index_blocks_flashmla,
    get_num_page_per_block_flashmla,
)
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


def dcp_on() -> bool:
    return get_parallel().dcp_enabled


def dcp_world() -> Tuple[int, int]:
    parallel = get_parallel()
    return parallel.dcp_size, parallel.dcp_rank


def to_local(lens: torch.Tensor) -> torch.Tensor:
    """Global per-request KV lengths -> this rank's lengths (identity w/o DCP)."""
    size, rank = dcp_world()
    return get_dcp_lens(lens, size, rank).to(torch.int32)


def split_lens(global_lens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Return ``(global, local)`` int32 lengths."""
    global_lens = global_lens.to(torch.int32)
    return global_lens, to_local(global_lens)


@dataclasses.dataclass
class DcpLens:
    global_lens: torch.Tensor
    local_lens: torch.Tensor

    @classmethod
    def from_global(cls, global_lens: torch.Tensor) -> "DcpLens":
        g, l = split_lens(global_lens)
        return cls(g, l)

    @property
    def causal_bound(self) -> torch.Tensor:
        return self.global_lens

    @property
    def kernel_lens(self) -> torch.Tensor:
        return self.local_lens


def local_page_table(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    local_lens: torch.Tensor,
    max_pages: int,
    page_size: int,
    v2p: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """This rank's cyclic slice of each request as a FlashMLA page table.

    ``local_lens`` must already be rank-local lengths.
    """
    size, rank = dcp_world()
    bs = req_pool_indices.shape[0]
    block_kv_indices = torch.full(
        (bs, max_pages), -1, dtype=torch.int32, device=req_pool_indices.device
    )
    create_mla_kv_page_table_for_dcp[
        (bs, get_num_kv_index_blocks_flashmla(max_pages, page_size))
    ](
        req_to_token,
        req_pool_indices,
        local_lens,
        block_kv_indices,
        v2p,
        req_to_token.stride(0),
        block_kv_indices.stride(0),
        PHYSICAL_PAGE_SIZE=page_size,
        DCP_SIZE=size,
        DCP_RANK=rank,
        PAGES_PER_BLOCK=get_num_page_per_block_flashmla(page_size),
        HAS_V2P=v2p is not None,
    )
    return block_kv_indices
