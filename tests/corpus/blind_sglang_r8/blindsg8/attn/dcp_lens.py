"""Length helpers shared by our MLA backends under decode context parallelism.

Naming: "global" lengths are the whole sequence's KV length; "local" lengths
are this DCP rank's interleaved share of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Tuple

import torch

from sglang.srt.layers.dcp.layout import (
    get_dcp_lens,
    update_local_kv_lens_for_dcp,
)
from sglang.srt.runtime_context import get_parallel

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def dcp_group() -> Tuple[int, int]:
    parallel = get_parallel()
    return parallel.dcp_size, parallel.dcp_rank


def rank_local_lens(seq_lens: torch.Tensor) -> torch.Tensor:
    """This rank's share of ``seq_lens`` (identity without DCP)."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return seq_lens
    return get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank).to(
        torch.int32
    )


def kernel_kv_lens(forward_batch: "ForwardBatch") -> torch.Tensor:
    """int32 per-request KV lengths of the live batch."""
    bs = forward_batch.batch_size
    return forward_batch.seq_lens[:bs].to(torch.int32)


def verify_kv_lens(seq_lens: torch.Tensor, num_draft_tokens: int) -> torch.Tensor:
    """Whole-sequence KV length a target-verify row attends up to."""
    return (seq_lens + num_draft_tokens).to(torch.int32)


def localize_kv_len_arr_(kv_len_arr: torch.Tensor) -> torch.Tensor:
    """In-place rank-local view of a host/device kv_len array."""
    update_local_kv_lens_for_dcp(kv_len_arr)
    return kv_len_arr


def dcp_dense_block_table(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    max_len: int,
) -> torch.Tensor:
    """Dense [bs, max_local_len] table of this rank's physical rows
    (token-interleaved owner rule, page_size 1)."""
    dcp_size, dcp_rank = dcp_group()
    rows = req_to_token[req_pool_indices, :max_len]
    if dcp_size == 1:
        return rows.to(torch.int32)
    # Same owner rule as layout.maybe_dcp_kernel_indices, row-wise.
    return (rows[:, dcp_rank::dcp_size] // dcp_size).to(torch.int32)
