"""Out-of-forward attention planning helpers.

SGLang records a pre-plan on the batch itself
(``ForwardBatch.mark_forward_metadata_ready``); the forward path then skips its
own ``init_forward_metadata``.  These helpers bundle the plan with the mark so
worker code reads as one step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    from sglang.srt.model_executor.model_runner import ModelRunner


# Kept for call sites ported from the pre-marker API.
LEGACY_PREPLANNED_FORWARD_KWARGS: Dict[str, Any] = {"skip_attn_backend_init": True}


def plan_and_mark(
    backend: "AttentionBackend",
    forward_batch: ForwardBatch,
    *,
    replan_equivalent: bool = False,
) -> ForwardBatch:
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return forward_batch


def plan_only(backend: "AttentionBackend", forward_batch: ForwardBatch) -> ForwardBatch:
    backend.init_forward_metadata(forward_batch)
    return forward_batch


def sync_stamped(forward_batch: ForwardBatch) -> bool:
    """Whether the scheduler stamped DP/MLP-sync token counts on this batch."""
    return forward_batch.global_num_tokens_cpu is not None


# expect: SG106
def run_draft_extend_preplanned(
    draft_runner: "ModelRunner",
    forward_batch: ForwardBatch,
) -> Optional["LogitsProcessorOutput"]:
    """Eager DRAFT_EXTEND_V2 forward with the plan hoisted out of the runner."""
    mode = forward_batch.forward_mode
    assert mode.is_draft_extend_v2() or mode.is_idle(), mode
    if mode.is_idle():
        return draft_runner.forward(forward_batch).logits_output
    plan_and_mark(draft_runner.attn_backend, forward_batch)
    return draft_runner.forward(forward_batch).logits_output


# expect: clean
def run_draft_extend_owned_plan(
    draft_runner: "ModelRunner",
    forward_batch: ForwardBatch,
) -> Optional["LogitsProcessorOutput"]:
    mode = forward_batch.forward_mode
    assert mode.is_draft_extend_v2() or mode.is_idle(), mode
    if mode.is_idle():
        return draft_runner.forward(forward_batch).logits_output
    plan_and_mark(
        draft_runner.attn_backend, forward_batch, replan_equivalent=True
    )
    return draft_runner.forward(forward_batch).logits_output


# expect: clean
def run_draft_extend_stamped(
    draft_runner: "ModelRunner",
    forward_batch: ForwardBatch,
) -> Optional["LogitsProcessorOutput"]:
    mode = forward_batch.forward_mode
    assert mode.is_draft_extend_v2() or mode.is_idle(), mode
    if mode.is_idle():
        return draft_runner.forward(forward_batch).logits_output
    plan_and_mark(
        draft_runner.attn_backend,
        forward_batch,
        replan_equivalent=sync_stamped(forward_batch),
    )
    return draft_runner.forward(forward_batch).logits_output
