"""Small helpers shared by the draft / verify paths of this fork."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    from sglang.srt.model_executor.model_runner import ModelRunner


class PlanMode(enum.Enum):
    """How a pre-planned batch is handed to ModelRunner.forward."""

    FORWARD_PLANS = "forward"  # leave planning to ModelRunner.forward
    EAGER_PREPLAN = "eager"  # plan here, mark ready
    POST_PAD_PREPLAN = "post_pad"  # pad first, then plan + mark


def preplan_batch(
    backend: "AttentionBackend",
    forward_batch: ForwardBatch,
    replan_equivalent: bool = False,
) -> None:
    """Plan attention metadata out of the forward and record it on the batch."""
    if forward_batch.forward_mode.is_idle():
        return
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)


def plan_only(backend: "AttentionBackend", forward_batch: ForwardBatch) -> None:
    """Plan without marking: ModelRunner.forward will plan again anyway."""
    backend.init_forward_metadata(forward_batch)


def pad_for_dp(forward_batch: ForwardBatch, model_runner: "ModelRunner") -> ForwardBatch:
    """Apply DP-attention / MLP-sync padding if the batch was gathered."""
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(model_runner)
    return forward_batch


def stamp_global_tokens(
    forward_batch: ForwardBatch, global_num_tokens: Optional[list]
) -> None:
    """Copy the DP all-gathered token counts onto a hand-built batch."""
    forward_batch.global_num_tokens_cpu = list(global_num_tokens)
    forward_batch.global_num_tokens_for_logprob_cpu = list(global_num_tokens)
