"""Small length helpers shared by the fork's MLA backends."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def rank_local_lens(lens: torch.Tensor) -> torch.Tensor:
    """This DCP rank's share of ``lens`` (identity when DCP is off)."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return lens
    return get_dcp_lens(lens, parallel.dcp_size, parallel.dcp_rank).to(torch.int32)


def batch_kv_lens(forward_batch: "ForwardBatch", bs: Optional[int] = None) -> torch.Tensor:
    """int32 KV lengths of the first ``bs`` requests of the batch."""
    if bs is None:
        bs = forward_batch.batch_size
    seq_lens = forward_batch.seq_lens[:bs]
    if seq_lens.dtype != torch.int32:
        seq_lens = seq_lens.to(torch.int32)
    return seq_lens


def decode_kernel_lens(forward_batch: "ForwardBatch", bs: Optional[int] = None) -> torch.Tensor:
    """KV lengths in the form the decode kernel expects on this rank."""
    return rank_local_lens(batch_kv_lens(forward_batch, bs))


def host_kv_lens(forward_batch: "ForwardBatch", bs: int, device) -> torch.Tensor:
    """Build the kernel lengths from the host copy (avoids a D2H sync later)."""
    lens_cpu = forward_batch.seq_lens_cpu[:bs].to(torch.int32)
    return lens_cpu.to(device, non_blocking=True)


def local_max_seq_len(max_seq_len: int) -> int:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return max_seq_len
    local = max_seq_len // parallel.dcp_size + int(
        parallel.dcp_rank < max_seq_len % parallel.dcp_size
    )
    return max(local, 1)
