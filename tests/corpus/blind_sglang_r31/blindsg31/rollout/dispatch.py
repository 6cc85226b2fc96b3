"""Per-mode rollout handlers, dispatched on the mode class."""

from __future__ import annotations

import functools

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.utils.common import require_mlp_sync

from blindsg31.rollout.batch_ops import runner_can_replay
from blindsg31.rollout.modes import (
    DecodeMode,
    DraftExtendMode,
    MixedChunkMode,
    PrefillExtendMode,
    RolloutMode,
    TargetVerifyMode,
)

# Handlers take the rollout worker (blindsg31.rollout.draft_workers.RolloutDraftWorker)
# unannotated: singledispatch resolves every annotation at registration time.


@functools.singledispatch
def run_rollout_mode(mode: RolloutMode, worker, forward_batch: ForwardBatch):
    raise NotImplementedError(f"no rollout handler for {type(mode).__name__}")


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; DECODE handler plans the draft backend, marks, forwards
# expect: SG106
@run_rollout_mode.register
def _run_decode(mode: DecodeMode, worker, forward_batch: ForwardBatch):
    if mode.num_steps > 1 and not forward_batch.forward_mode.is_idle():
        worker.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=mode.replan_after_pad
        )
    return worker.draft_runner.forward(forward_batch).logits_output


# idiom: speculative/eagle_worker_common.py run_eagle_verify; TARGET_VERIFY handler plans + marks, target forward re-plans verify anyway
# expect: clean
@run_rollout_mode.register
def _run_target_verify(mode: TargetVerifyMode, worker, forward_batch: ForwardBatch):
    target_runner = worker.target_runner
    if not runner_can_replay(target_runner, forward_batch):
        target_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=mode.replan_after_pad
        )
    return target_runner.forward(forward_batch).logits_output


# idiom: speculative/eagle_worker_common.py prepare_for_draft_extend; DRAFT_EXTEND_V2 handler marks with the mode's replan flag (True for this mode)
# expect: clean
@run_rollout_mode.register
def _run_draft_extend(mode: DraftExtendMode, worker, forward_batch: ForwardBatch):
    if not forward_batch.forward_mode.is_idle():
        worker.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=mode.replan_after_pad
        )
    return worker.draft_runner.forward(forward_batch).logits_output


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill; EXTEND handler marks with the mode's replan flag (False for this mode)
# expect: SG106
@run_rollout_mode.register
def _run_prefill_extend(mode: PrefillExtendMode, worker, forward_batch: ForwardBatch):
    if not forward_batch.forward_mode.is_idle():
        worker.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=mode.replan_after_pad
        )
    return worker.draft_runner.forward(forward_batch).logits_output


# idiom: model_executor/forward_batch_info.py mark_forward_metadata_ready; MIXED handler opts into re-plan exactly when MLP sync (DP attention) can pad
# expect: clean
@run_rollout_mode.register
def _run_mixed_chunk(mode: MixedChunkMode, worker, forward_batch: ForwardBatch):
    runner = worker.target_runner
    runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(
        # The forward pads only under MLP sync (DP attention); that is
        # exactly when the planned shapes can go stale.
        replan_equivalent=require_mlp_sync()
    )
    return runner.forward(forward_batch).logits_output
