"""KV-length helpers for the fork's MLA decode paths."""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from sglang.srt.distributed.parallel_state import get_dcp_rank, get_dcp_world_size
from sglang.srt.layers.dcp.layout import get_dcp_chain_spec_lens, get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def dcp_topology() -> Tuple[int, int]:
    return get_dcp_world_size(), get_dcp_rank()


def kernel_kv_lens(forward_batch: ForwardBatch, bs: Optional[int] = None) -> torch.Tensor:
    """int32 per-request KV lengths, the dtype the trtllm MLA kernel takes."""
    seq_lens = forward_batch.seq_lens if bs is None else forward_batch.seq_lens[:bs]
    return seq_lens.to(torch.int32)


def rank_local_kv_lens(
    forward_batch: ForwardBatch, bs: Optional[int] = None
) -> torch.Tensor:
    """int32 KV lengths this DCP rank holds (cyclic token interleave)."""
    seq_lens = forward_batch.seq_lens if bs is None else forward_batch.seq_lens[:bs]
    dcp_size, dcp_rank = dcp_topology()
    return get_dcp_lens(seq_lens, dcp_size, dcp_rank).to(torch.int32)


def chain_local_kv_lens(total_kv_lens: torch.Tensor, tokens_per_req: int) -> torch.Tensor:
    """Per-query-row local KV frontiers of a speculative chain (request-major)."""
    dcp_size, dcp_rank = dcp_topology()
    return get_dcp_chain_spec_lens(total_kv_lens, tokens_per_req, dcp_size, dcp_rank)
