"""Small planning helpers shared by the fork's draft worker and runner."""
from __future__ import annotations

from typing import TYPE_CHECKING

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner


def plan_and_seal(attn_backend, forward_batch: ForwardBatch) -> ForwardBatch:
    """Plan attention metadata and record it so the forward path skips it."""
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return forward_batch


def plan_and_seal_replannable(attn_backend, forward_batch: ForwardBatch) -> ForwardBatch:
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    return forward_batch


def pad_for_dp(forward_batch: ForwardBatch, runner: "ModelRunner") -> None:
    """DP-attention padding, only when the batch is MLP-synchronised."""
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(runner)


def run_model_raw(runner: "ModelRunner", forward_batch: ForwardBatch):
    """Call the model module directly, bypassing ModelRunner.forward."""
    return runner.model.forward(
        forward_batch.input_ids, forward_batch.positions, forward_batch
    )


def padded_raw_forward(runner: "ModelRunner", forward_batch: ForwardBatch):
    pad_for_dp(forward_batch, runner)
    return run_model_raw(runner, forward_batch)
