"""Draft-extend forwards wrapped in the fork's decorators."""

from __future__ import annotations

from typing import Any

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg41.common.wrappers import (
    retry,
    single_rank_only,
    timed,
    without_context_parallel,
)


def _draft_extend_only(fb: ForwardBatch) -> ForwardBatch:
    assert fb.forward_mode.is_draft_extend_v2(), fb.forward_mode
    return fb


def _plain_forward(runner: ModelRunner, fb: ForwardBatch):
    """Fallback: let ModelRunner plan the (padded) batch itself."""
    return runner.forward(fb).logits_output


def _forward_kw(runner: ModelRunner, *args, **kwargs):
    return runner.forward(*args, **kwargs).logits_output


def _forward_replanning(runner: ModelRunner, fb: ForwardBatch, *args, **kwargs):
    # A batch that will go through the MLP-sync pass must be planned on its
    # padded shape: drop the pre-plan record and let the forward plan.
    if fb.forward_metadata_ready and fb.global_num_tokens_cpu is not None:
        fb.forward_metadata_ready = False
    return runner.forward(fb, *args, **kwargs).logits_output


# expect: SG106
@timed("draft_extend")
def timed_draft_extend(runner: ModelRunner, fb: ForwardBatch):
    fb = _draft_extend_only(fb)
    runner.attn_backend.init_forward_metadata(fb)
    fb.mark_forward_metadata_ready()
    return runner.forward(fb).logits_output


# expect: clean
@single_rank_only(fallback=_plain_forward)
def switched_draft_extend(runner: ModelRunner, fb: ForwardBatch):
    fb = _draft_extend_only(fb)
    runner.attn_backend.init_forward_metadata(fb)
    fb.mark_forward_metadata_ready()
    return runner.forward(fb).logits_output


# expect: SG106
@without_context_parallel(fallback=_plain_forward)
def cp_switched_draft_extend(runner: ModelRunner, fb: ForwardBatch):
    fb = _draft_extend_only(fb)
    runner.attn_backend.init_forward_metadata(fb)
    fb.mark_forward_metadata_ready()
    return runner.forward(fb).logits_output


# expect: clean
@retry(times=2)
def retried_draft_extend(runner: ModelRunner, fb: ForwardBatch):
    fb = _draft_extend_only(fb)
    runner.attn_backend.init_forward_metadata(fb)
    fb.mark_forward_metadata_ready(replan_equivalent=True)
    return runner.forward(fb).logits_output


# expect: SG106
@retry(times=2)
@timed("draft_extend_kw")
def retried_timed_draft_extend(runner: ModelRunner, fb: ForwardBatch, **extra: Any):
    fb = _draft_extend_only(fb)
    runner.attn_backend.init_forward_metadata(fb)
    return _forward_kw(runner, fb, skip_attn_backend_init=True, **extra)


# expect: clean
@timed("draft_extend_replan")
def timed_draft_extend_wrapped(runner: ModelRunner, fb: ForwardBatch):
    fb = _draft_extend_only(fb)
    runner.attn_backend.init_forward_metadata(fb)
    fb.mark_forward_metadata_ready()
    return _forward_replanning(runner, fb)
