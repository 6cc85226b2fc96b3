"""Length bookkeeping for decode context parallelism (DCP).

Under DCP every rank keeps a cyclic slice of each request's KV cache, so a
request has two lengths: the *global* one (what the scheduler tracks) and the
*rank-local* one (how many KV slots this rank owns).  The helpers below keep
both and name them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import torch

from sglang.srt.layers.dcp.layout import get_dcp_chain_spec_lens, get_dcp_lens
from sglang.srt.runtime_context import get_parallel


@dataclass
class DcpLens:
    local: torch.Tensor
    global_: torch.Tensor

    def head(self, bs: int) -> "DcpLens":
        return DcpLens(local=self.local[:bs], global_=self.global_[:bs])


def to_local(global_lens: torch.Tensor) -> torch.Tensor:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return global_lens.to(torch.int32)
    return get_dcp_lens(global_lens, parallel.dcp_size, parallel.dcp_rank).to(
        torch.int32
    )


def split_global_local(global_lens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Return ``(global, local)`` int32 lengths."""
    global_i32 = global_lens.to(torch.int32)
    return global_i32, to_local(global_i32)


def verify_global_lens(seq_lens: torch.Tensor, draft_token_num: int) -> torch.Tensor:
    """Global KV length a target-verify query attends up to (prefix + window)."""
    return (seq_lens + draft_token_num).to(torch.int32)


def chain_row_lens(
    total_kv_lens: torch.Tensor, tokens_per_req: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-query-row ``(local, global)`` frontiers of a speculative chain.

    Row ``j`` of request ``r`` sees the global prefix ``total - tokens + j + 1``;
    the local frontier is derived from that global value, not by offsetting a
    local length.
    """
    parallel = get_parallel()
    steps = torch.arange(
        1, tokens_per_req + 1, dtype=torch.int32, device=total_kv_lens.device
    )
    total = total_kv_lens.to(torch.int32).unsqueeze(1)
    global_rows = torch.where(
        total >= tokens_per_req,
        total - tokens_per_req + steps,
        torch.zeros_like(total - tokens_per_req + steps),
    )
    local_rows = get_dcp_chain_spec_lens(
        total_kv_lens, tokens_per_req, parallel.dcp_size, parallel.dcp_rank
    )
    return local_rows, global_rows.reshape(-1)
