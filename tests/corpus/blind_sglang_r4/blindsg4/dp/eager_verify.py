"""Eager (graph-less) verify / draft-extend helpers used on DP-attention ranks.

These bypass ``ModelRunner.forward`` so the fork can interleave its own
logits post-processing; the MLP-sync padding is therefore done here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

from blindsg4.dp.sync import pad_for_dp, run_model_direct

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner


# expect: SG106
def forward_draft_extend_padded(model_runner: "ModelRunner", forward_batch: ForwardBatch):
    if not forward_batch.forward_mode.is_idle():
        model_runner.attn_backend.init_forward_metadata(forward_batch)
    pad_for_dp(forward_batch, model_runner)
    ret = run_model_direct(model_runner, forward_batch)
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.post_forward_mlp_sync_batch(ret)
    return ret


# expect: clean
def forward_draft_extend_padded_fixed(
    model_runner: "ModelRunner", forward_batch: ForwardBatch
):
    pad_for_dp(forward_batch, model_runner)
    if not forward_batch.forward_mode.is_idle():
        model_runner.attn_backend.init_forward_metadata(forward_batch)
    ret = run_model_direct(model_runner, forward_batch)
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.post_forward_mlp_sync_batch(ret)
    return ret


def _run_target_verify_eager(
    model_runner: "ModelRunner", forward_batch: ForwardBatch, *, preplanned: bool
):
    if forward_batch.global_num_tokens_cpu is None:
        if not preplanned:
            model_runner.attn_backend.init_forward_metadata(forward_batch)
        return run_model_direct(model_runner, forward_batch)
    forward_batch.prepare_mlp_sync_batch(model_runner)
    if not preplanned:
        model_runner.attn_backend.init_forward_metadata(forward_batch)
    ret = run_model_direct(model_runner, forward_batch)
    forward_batch.post_forward_mlp_sync_batch(ret)
    return ret


# expect: SG106
def verify_with_preplan(model_runner: "ModelRunner", forward_batch: ForwardBatch):
    # Plan on the scheduler stream while the draft tail is still running.
    attn_backend = model_runner.attn_backend
    attn_backend.init_forward_metadata(forward_batch)
    return _run_target_verify_eager(model_runner, forward_batch, preplanned=True)


# expect: clean
def verify_deferred_plan(model_runner: "ModelRunner", forward_batch: ForwardBatch):
    if forward_batch.global_num_tokens_cpu is None:
        model_runner.attn_backend.init_forward_metadata(forward_batch)
        return _run_target_verify_eager(model_runner, forward_batch, preplanned=True)
    return _run_target_verify_eager(model_runner, forward_batch, preplanned=False)
