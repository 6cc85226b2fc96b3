"""Attention-metadata pre-planning helpers shared by the fork's spec workers.

The draft / verify workers build their ForwardBatch outside ModelRunner and
sometimes plan the attention metadata themselves (plan stream, multi-step
draft backends).  These helpers keep the plan + readiness-mark pairing in one
place.  See ``ForwardBatch.mark_forward_metadata_ready`` for the contract.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def preplan_forward_metadata(
    attn_backend: "AttentionBackend",
    forward_batch: "ForwardBatch",
    *,
    replan_equivalent: bool = False,
) -> None:
    """Plan ``forward_batch`` on ``attn_backend`` and record the plan.

    ``replan_equivalent`` is forwarded to the marker unchanged: only pass True
    when ModelRunner's own ``init_forward_metadata`` on the final batch is
    equivalent to this plan.
    """
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)


def plan_only(attn_backend: "AttentionBackend", forward_batch: "ForwardBatch") -> None:
    """Warm the backend plan without claiming it for the forward.

    The batch stays unmarked, so ModelRunner plans again on the final
    (post-padding) batch.
    """
    attn_backend.init_forward_metadata(forward_batch)


def batch_will_be_padded(forward_batch: "ForwardBatch") -> bool:
    """ModelRunner pads eager batches for MLP sync iff the DP counts are set."""
    return forward_batch.global_num_tokens_cpu is not None


def maybe_preplan_forward_metadata(
    attn_backend: "AttentionBackend", forward_batch: "ForwardBatch"
) -> bool:
    """Pre-plan and mark only when the forward will not reshape the batch."""
    if forward_batch.forward_mode.is_idle() or batch_will_be_padded(forward_batch):
        return False
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return True


def plan_draft_steps(draft_attn_backend, forward_batch: "ForwardBatch") -> None:
    """Plan every step of a multi-step draft backend and mark the batch."""
    draft_attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
