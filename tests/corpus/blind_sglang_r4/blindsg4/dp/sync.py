"""Small helpers shared by the fork's DP-attention draft / verify paths."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable, List, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.model_executor.model_runner import ModelRunner


def dp_sync_active(forward_batch: ForwardBatch) -> bool:
    """Whether this batch takes part in a DP-attention MLP sync."""
    return forward_batch.global_num_tokens_cpu is not None


def attach_dp_token_counts(
    forward_batch: ForwardBatch,
    batch: "ScheduleBatch",
    num_tokens_per_req: int = 1,
) -> None:
    """Publish per-DP-rank token counts on a draft batch built by hand.

    The fork builds some draft batches outside ``ForwardBatch.init_new``; the
    runner only pads for DP attention when ``global_num_tokens_cpu`` is set.
    """
    if batch.global_num_tokens is None:
        return
    counts: List[int] = [n * num_tokens_per_req for n in batch.global_num_tokens]
    forward_batch.global_num_tokens_cpu = counts
    forward_batch.global_num_tokens_for_logprob_cpu = list(counts)
    forward_batch.global_num_tokens_gpu = torch.tensor(
        counts, dtype=torch.int64, device=forward_batch.seq_lens.device
    )
    forward_batch.global_num_tokens_for_logprob_gpu = (
        forward_batch.global_num_tokens_gpu.clone()
    )


def pad_for_dp(forward_batch: ForwardBatch, model_runner: "ModelRunner") -> None:
    """Pad a batch to the DP-synchronised shape (no-op without DP sync)."""
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(model_runner)


def plan_only(attn_backend, forward_batch: ForwardBatch) -> None:
    if forward_batch.forward_mode.is_idle():
        return
    attn_backend.init_forward_metadata(forward_batch)


def plan_and_mark(
    attn_backend, forward_batch: ForwardBatch, replan: bool = False
) -> None:
    """Pre-plan attention metadata and record it on the batch."""
    if forward_batch.forward_mode.is_idle():
        return
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan)


def run_model_direct(model_runner: "ModelRunner", forward_batch: ForwardBatch):
    """Call the model's forward without going through ``ModelRunner.forward``."""
    return model_runner.model.forward(
        forward_batch.input_ids, forward_batch.positions, forward_batch
    )


def _preplanned_forward(
    model_runner: "ModelRunner", attn_backend, forward_batch: ForwardBatch
):
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return model_runner.forward(forward_batch)


def _replanning_forward(
    model_runner: "ModelRunner", attn_backend, forward_batch: ForwardBatch
):
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    return model_runner.forward(forward_batch)


def make_preplanned_forward(
    model_runner: "ModelRunner", attn_backend, *, replan_safe: bool = False
) -> Callable[[ForwardBatch], object]:
    """Bind a runner + backend into a single-argument forward callable."""
    fn = _replanning_forward if replan_safe else _preplanned_forward
    return functools.partial(fn, model_runner, attn_backend)
