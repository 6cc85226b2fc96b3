"""Helpers that build and pre-plan draft forward batches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    from sglang.srt.model_executor.model_runner import ModelRunner


def preplan_draft_batch(
    attn_backend: AttentionBackend, forward_batch: ForwardBatch
) -> ForwardBatch:
    """Plan the multi-step draft metadata once, outside the per-step forward."""
    if forward_batch.forward_mode.is_idle():
        return forward_batch
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return forward_batch


def pad_and_preplan_draft_batch(
    attn_backend: AttentionBackend,
    forward_batch: ForwardBatch,
    model_runner: ModelRunner,
) -> ForwardBatch:
    """Like ``preplan_draft_batch`` but settles the DP-synced shape first."""
    if forward_batch.forward_mode.is_idle():
        return forward_batch
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(model_runner)
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return forward_batch


def maybe_pad_for_dp(
    forward_batch: ForwardBatch, model_runner: ModelRunner
) -> Optional[int]:
    """Run the MLP-sync padding early; return the pre-pad batch size."""
    if forward_batch.global_num_tokens_cpu is None:
        return None
    real_bs = forward_batch.batch_size
    forward_batch.prepare_mlp_sync_batch(model_runner)
    return real_bs
