"""Length helpers for the DCP port: global (whole-sequence) and rank-local
KV lengths per forward mode."""

from __future__ import annotations

from typing import NamedTuple, Tuple

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

from blindsg34.dcp.world import dcp_from_parallel


class DcpLens(NamedTuple):
    local: torch.Tensor
    global_: torch.Tensor


def to_local(lens: torch.Tensor, dcp_size: int, dcp_rank: int) -> torch.Tensor:
    return get_dcp_lens(lens, dcp_size, dcp_rank).to(torch.int32)


def local_max_seq_len(max_seq_len: int, dcp_size: int, dcp_rank: int) -> int:
    if dcp_size == 1:
        return max_seq_len
    local = max_seq_len // dcp_size + int(dcp_rank < max_seq_len % dcp_size)
    return max(local, 1)


def verify_global_lens(seq_lens: torch.Tensor, num_draft_tokens: int) -> torch.Tensor:
    """Target verify attends seq_lens + the whole draft window."""
    return (seq_lens + num_draft_tokens).to(torch.int32)


def draft_extend_global_lens(forward_batch: ForwardBatch) -> torch.Tensor:
    """NOTE(draft_extend seq_len handling): pad every row's key length to the
    widest query row."""
    max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
    return (
        forward_batch.seq_lens - forward_batch.extend_seq_lens + max_seq_len_q
    ).to(torch.int32)


def global_and_local(
    seq_lens: torch.Tensor, dcp_size: int, dcp_rank: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Returns ``(global, local)`` -- global first."""
    global_lens = seq_lens.to(torch.int32)
    return global_lens, to_local(global_lens, dcp_size, dcp_rank)


def dcp_lens_for_spec(forward_batch: ForwardBatch, num_draft_tokens: int) -> DcpLens:
    dcp_size, dcp_rank = dcp_from_parallel()
    mode = forward_batch.forward_mode
    if mode.is_target_verify():
        global_lens = verify_global_lens(forward_batch.seq_lens, num_draft_tokens)
    elif mode.is_draft_extend_v2():
        global_lens = draft_extend_global_lens(forward_batch)
    else:
        global_lens = forward_batch.seq_lens.to(torch.int32)
    return DcpLens(local=to_local(global_lens, dcp_size, dcp_rank), global_=global_lens)


def dcp_lens_for_spec_owner_fastpath(
    forward_batch: ForwardBatch, num_draft_tokens: int
) -> DcpLens:
    """Like dcp_lens_for_spec, but draft-extend rows are treated as owned by
    this rank (the freshly written window is replicated)."""
    dcp_size, dcp_rank = dcp_from_parallel()
    mode = forward_batch.forward_mode
    if mode.is_draft_extend_v2():
        global_lens = draft_extend_global_lens(forward_batch)
        return DcpLens(local=global_lens, global_=global_lens)
    if mode.is_target_verify():
        global_lens = verify_global_lens(forward_batch.seq_lens, num_draft_tokens)
    else:
        global_lens = forward_batch.seq_lens.to(torch.int32)
    return DcpLens(local=to_local(global_lens, dcp_size, dcp_rank), global_=global_lens)
