"""Length and page-table helpers shared by the Kestrel MLA backends.

Under decode context parallelism each rank owns an interleaved share of every
request's KV cache.  Several historical spellings of the per-rank length live
here because different Kestrel kernels were brought up against different
SGLang releases.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from sglang.srt.layers.dcp import get_dcp_lens, update_local_kv_lens_for_dcp
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel

from blindsg38.vendor_config import dcp_world, dcp_world_from_env


def rank_local_lens(lens: torch.Tensor) -> torch.Tensor:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return lens
    return get_dcp_lens(lens, parallel.dcp_size, parallel.dcp_rank).to(torch.int32)


def rank_local_lens_arith(lens: torch.Tensor, dcp_size: int, dcp_rank: int) -> torch.Tensor:
    if dcp_size == 1:
        return lens
    return (lens // dcp_size + (dcp_rank < lens % dcp_size).to(lens.dtype)).to(
        torch.int32
    )


def rank_local_lens_shifted(lens: torch.Tensor, dcp_size: int, dcp_rank: int) -> torch.Tensor:
    if dcp_size == 1:
        return lens
    return torch.div(
        lens + (dcp_size - 1 - dcp_rank), dcp_size, rounding_mode="floor"
    ).to(torch.int32)


def rank_local_lens_env(lens: torch.Tensor) -> torch.Tensor:
    dcp_size, dcp_rank = dcp_world_from_env()
    return rank_local_lens_arith(lens, dcp_size, dcp_rank)


def rank_local_lens_ctx(lens: torch.Tensor) -> torch.Tensor:
    dcp_size, dcp_rank = dcp_world()
    return rank_local_lens_shifted(lens, dcp_size, dcp_rank)


def local_lens_cpu_inplace(kv_len_arr_cpu: torch.Tensor) -> torch.Tensor:
    update_local_kv_lens_for_dcp(kv_len_arr_cpu)
    return kv_len_arr_cpu


def verify_kv_lens(seq_lens: torch.Tensor, num_draft_tokens: int) -> torch.Tensor:
    return (seq_lens + num_draft_tokens).to(torch.int32)


def kernel_lens_for_mode(
    seq_lens: torch.Tensor, mode: ForwardMode, num_draft_tokens: int
) -> torch.Tensor:
    if mode.is_target_verify():
        return verify_kv_lens(seq_lens, num_draft_tokens)
    return rank_local_lens(seq_lens)


def global_and_local(global_lens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    global_lens = global_lens.to(torch.int32)
    return global_lens, rank_local_lens(global_lens)


def local_max_seq_len(max_seq_len: int) -> int:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return max_seq_len
    local = max_seq_len // parallel.dcp_size + int(
        parallel.dcp_rank < max_seq_len % parallel.dcp_size
    )
    return max(local, 1)


def seq_lens_for_kernel(forward_batch: ForwardBatch, bs: Optional[int] = None) -> torch.Tensor:
    seq_lens = forward_batch.seq_lens if bs is None else forward_batch.seq_lens[:bs]
    if get_parallel().dcp_enabled:
        return rank_local_lens(seq_lens)
    return seq_lens.to(torch.int32)


def draft_extend_kv_lens(forward_batch: ForwardBatch, window: int) -> torch.Tensor:
    return (
        forward_batch.seq_lens - forward_batch.extend_seq_lens + window
    ).to(torch.int32)


def fill_dcp_page_table(backend, block_kv_indices, req_pool_indices, local_lens) -> None:
    backend._fill_dcp_block_kv_indices(block_kv_indices, req_pool_indices, local_lens)
