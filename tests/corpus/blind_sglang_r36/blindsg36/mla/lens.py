"""Rank-local KV length helpers for decode context parallelism (DCP).

Each DCP rank holds token positions p with p % dcp_size == dcp_rank (the
token-interleaved layout of sglang.srt.layers.dcp.layout), so a request of
length L owns L // N + (rank < L % N) of its KV entries on this rank.

Several equivalent spellings live here because different experiments were
written against different SGLang releases.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch

from sglang.kernels.ops.attention.dcp_kernels import create_mla_kv_page_table_for_dcp
from sglang.kernels.ops.attention.kv_indices import (
    get_num_kv_index_blocks_flashmla,
    get_num_page_per_block_flashmla,
)
from sglang.srt.distributed.parallel_state import get_dcp_group
from sglang.srt.layers.dcp.layout import get_dcp_lens, update_local_kv_lens_for_dcp
from sglang.srt.runtime_context import get_parallel, get_server_args

# Sweep knobs (mutated by the benchmark scripts).
MLA_CFG: Dict[str, Any] = {
    "kernel_localizes": True,
    "use_cute_dsl": True,
    "page_size": 64,
    "force_whole_max": False,
}


def dcp_world() -> Tuple[int, int]:
    p = get_parallel()
    return p.attn_dcp_size, p.attn_dcp_rank


def dcp_world_from_group() -> Tuple[int, int]:
    group = get_dcp_group()
    return group.world_size, group.rank_in_group


def dcp_world_from_server_args() -> Tuple[int, int]:
    size = int(get_server_args().dcp_size)
    rank = get_parallel().attn_dcp_rank if size > 1 else 0
    return size, rank


def local_lens_arith(lens: torch.Tensor, dcp_size: int, dcp_rank: int) -> torch.Tensor:
    if dcp_size == 1:
        return lens
    return lens // dcp_size + (dcp_rank < lens % dcp_size).to(lens.dtype)


def local_lens_div(lens: torch.Tensor, dcp_size: int, dcp_rank: int) -> torch.Tensor:
    # floor((L - rank - 1) / N) + 1, which is 0 for L == 0 and rank < N.
    if dcp_size == 1:
        return lens
    return torch.div(lens - dcp_rank - 1, dcp_size, rounding_mode="floor") + 1


def local_lens_py(lens_cpu, dcp_size: int, dcp_rank: int):
    return [int(l) // dcp_size + int(dcp_rank < int(l) % dcp_size) for l in lens_cpu]


def maybe_local(lens: torch.Tensor, dcp_size: int = 1, dcp_rank: int = 0) -> torch.Tensor:
    """get_dcp_lens with defaults, for call sites that may run without DCP."""
    return get_dcp_lens(lens, dcp_size, dcp_rank)


def localize_inplace_(lens: torch.Tensor) -> torch.Tensor:
    update_local_kv_lens_for_dcp(lens)
    return lens


def local_max(max_len: int, dcp_size: int, dcp_rank: int) -> int:
    if dcp_size == 1:
        return max_len
    return max(max_len // dcp_size + int(dcp_rank < max_len % dcp_size), 1)


def split_lens(seq_lens: torch.Tensor, extra: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """(global, local) int32 lengths of seq_lens + extra on this DCP rank."""
    glob = (seq_lens + extra).to(torch.int32)
    p = get_parallel()
    if not p.dcp_enabled:
        return glob, glob
    return glob, get_dcp_lens(glob, p.dcp_size, p.dcp_rank).to(torch.int32)


def fill_dcp_page_table(req_to_token, req_pool_indices, local_lens, block_kv_indices,
                        page_size: int, v2p=None) -> None:
    """Rank-local page table (as TRTLLMMLABackend._fill_dcp_block_kv_indices)."""
    p = get_parallel()
    create_mla_kv_page_table_for_dcp[
        (
            block_kv_indices.shape[0],
            get_num_kv_index_blocks_flashmla(block_kv_indices.shape[1], page_size),
        )
    ](
        req_to_token,
        req_pool_indices,
        local_lens,
        block_kv_indices,
        v2p,
        req_to_token.stride(0),
        block_kv_indices.stride(0),
        PHYSICAL_PAGE_SIZE=page_size,
        DCP_SIZE=p.dcp_size,
        DCP_RANK=p.dcp_rank,
        PAGES_PER_BLOCK=get_num_page_per_block_flashmla(page_size),
        HAS_V2P=v2p is not None,
    )
