"""Per-step DCP length views shared by the fork's MLA backends.

Under decode context parallelism each rank stores the KV positions whose
index modulo ``dcp_size`` equals its rank (``layers/dcp/layout.get_dcp_lens``).
A kernel launch needs two views of the same step:

* the rank-local KV length (paging, split-KV, zero-KV fixup), and
* the global KV length (the causal bound for multi-token queries).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel


@dataclass
class DcpLens:
    """Rank-local and global KV lengths of one decode step (int32)."""

    rank_local: torch.Tensor
    global_kv: torch.Tensor
    max_local: Optional[int] = None


def resolve_dcp_lens(metadata, forward_batch: ForwardBatch, backend) -> DcpLens:
    """Read both views from TRT-LLM MLA decode metadata, falling back to the
    batch's global ``seq_lens`` when the metadata carries no hoisted copy."""
    bs = forward_batch.batch_size
    if metadata.seq_lens_k is not None and metadata.global_seq_lens_k is not None:
        return DcpLens(
            rank_local=metadata.seq_lens_k[:bs],
            global_kv=metadata.global_seq_lens_k[:bs],
            max_local=metadata.max_seq_len_k,
        )
    global_kv = forward_batch.seq_lens[:bs].to(torch.int32)
    return DcpLens(
        rank_local=backend._get_dcp_local_seq_lens(global_kv),
        global_kv=global_kv,
        max_local=metadata.max_seq_len_k,
    )


def split_dcp_lens(global_seq_lens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Return ``(global_lens, local_lens)`` as int32 for this rank."""
    parallel = get_parallel()
    global_lens = global_seq_lens.to(torch.int32)
    if not parallel.dcp_enabled:
        return global_lens, global_lens
    local_lens = get_dcp_lens(global_lens, parallel.dcp_size, parallel.dcp_rank).to(
        torch.int32
    )
    return global_lens, local_lens
