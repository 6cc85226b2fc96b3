"""Small DP-attention helpers shared by the worker / runner overrides."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

import torch

from sglang.srt.layers.dp_attention import is_dp_attention_enabled
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils.common import ceil_align, require_mlp_sync

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner


def dp_sync_active(forward_batch: ForwardBatch) -> bool:
    """True when this batch takes part in the DP-attention MLP sync."""
    return forward_batch.global_num_tokens_cpu is not None


def sync_batch_across_dp(forward_batch: ForwardBatch, model_runner: "ModelRunner"):
    """Bring this rank's batch to the shape every DP rank agreed on.

    Same entry point ModelRunner uses in ``_prepare_eager_forward_batch``; kept
    here so the workers can run it early (before their own stream work).
    """
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(model_runner)
    else:
        forward_batch.prepare_attn_tp_scatter_input(model_runner)
    return forward_batch


def lockstep(forward_batch: ForwardBatch, model_runner: "ModelRunner") -> None:
    if is_dp_attention_enabled() and require_mlp_sync():
        sync_batch_across_dp(forward_batch, model_runner)


def bucket_for(raw_bs: int, capture_bs: Sequence[int]) -> Optional[int]:
    for size in sorted(capture_bs):
        if size >= raw_bs:
            return size
    return None


def grow_to_bucket(
    forward_batch: ForwardBatch,
    model_runner: "ModelRunner",
    capture_bs: Sequence[int],
    tokens_per_req: int = 1,
) -> int:
    """Pad the live batch to the next captured size (rows filled with the
    backend's cuda-graph seq_len fill value)."""
    raw_bs = forward_batch.batch_size
    bs = bucket_for(raw_bs, capture_bs) or raw_bs
    if bs != raw_bs:
        forward_batch._pad_inputs_to_size(model_runner, bs * tokens_per_req, bs)
        forward_batch.batch_size = bs
    return bs


def align_tokens_to_attn_tp(
    forward_batch: ForwardBatch, model_runner: "ModelRunner"
) -> int:
    """Round the token count up to a multiple of attn_tp_size so the
    reduce-scatter after attention divides evenly."""
    num_tokens = forward_batch.input_ids.shape[0]
    aligned = ceil_align(num_tokens, get_parallel().attn_tp_size)
    if aligned != num_tokens:
        bs = forward_batch.batch_size
        if forward_batch.forward_mode.is_decode() and forward_batch.spec_info is None:
            # Plain decode: one token per request, so pad requests too.
            bs = aligned
        forward_batch._pad_inputs_to_size(model_runner, aligned, bs)
        forward_batch.batch_size = bs
    return aligned


def pad_rows(t: torch.Tensor, rows: int, value: int = 0) -> torch.Tensor:
    if t.shape[0] >= rows:
        return t
    extra = t.new_full((rows - t.shape[0], *t.shape[1:]), value)
    return torch.cat([t, extra], dim=0)
