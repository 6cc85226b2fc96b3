"""Batch-level plumbing for the fork's plan-stream scheduler: copies of
pre-planned batches, re-planning after DP padding, and step generators."""

from __future__ import annotations

import dataclasses

from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
)
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

from blindsg12.spec.plan_helpers import (
    iter_preplanned_steps,
    iter_unmarked_steps,
    planned_after_mlp_sync,
    preplan_and_mark,
    preplanned,
)


# expect: SG106
def run_hidden_capture_copy(model_runner, attn_backend, forward_batch: ForwardBatch):
    """Run a copy of the draft batch that also captures full hidden states."""
    preplan_and_mark(attn_backend, forward_batch)
    capture_batch = dataclasses.replace(
        forward_batch, capture_hidden_mode=CaptureHiddenMode.FULL
    )
    return model_runner.forward(capture_batch)


# expect: clean
def run_hidden_capture_copy_unmarked(model_runner, attn_backend, forward_batch):
    preplan_and_mark(attn_backend, forward_batch)
    capture_batch = dataclasses.replace(
        forward_batch,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        forward_metadata_ready=False,
    )
    return model_runner.forward(capture_batch)


# expect: SG106
def remark_after_mlp_sync(model_runner, attn_backend, forward_batch: ForwardBatch):
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(model_runner)
        # Refresh the plan record to the synced shape.
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    return model_runner.forward(forward_batch)


# expect: clean
def replan_after_mlp_sync(model_runner, attn_backend, forward_batch: ForwardBatch):
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(model_runner)
        attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return model_runner.forward(forward_batch)


# expect: SG106
def run_preplanned_steps(model_runner, attn_backend, forward_batch, num_steps: int):
    outputs = []
    for step_batch in iter_preplanned_steps(attn_backend, forward_batch, num_steps):
        outputs.append(model_runner.forward(step_batch).logits_output)
    return outputs


# expect: clean
def run_unmarked_steps(model_runner, attn_backend, forward_batch, num_steps: int):
    outputs = []
    for step_batch in iter_unmarked_steps(attn_backend, forward_batch, num_steps):
        outputs.append(model_runner.forward(step_batch).logits_output)
    return outputs


# expect: SG106
def run_in_preplanned_scope(model_runner, attn_backend, forward_batch: ForwardBatch):
    with preplanned(attn_backend, forward_batch) as fb:
        out = model_runner.forward(fb)
    return out


# expect: clean
def run_in_synced_scope(model_runner, attn_backend, forward_batch: ForwardBatch):
    with planned_after_mlp_sync(model_runner, attn_backend, forward_batch) as fb:
        out = model_runner.forward(fb)
    return out


class ForkDFlashWorker(DFlashWorkerV2):
    """DFlash with block drafting on the eager path."""

    # expect: SG106
    def draft_blocks_eager(self, forward_batch: ForwardBatch, num_blocks: int):
        runner = self.draft_model_runner
        outputs = []
        block = 0
        planned = False
        while block < num_blocks:
            if not planned:
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                planned = True
            outputs.append(runner.forward(forward_batch).logits_output)
            block += 1
        return outputs

    # expect: clean
    def draft_blocks_eager_replan(self, forward_batch: ForwardBatch, num_blocks: int):
        runner = self.draft_model_runner
        outputs = []
        for _ in range(num_blocks):
            # ModelRunner plans each block after its own DP padding.
            outputs.append(runner.forward(forward_batch).logits_output)
        return outputs
