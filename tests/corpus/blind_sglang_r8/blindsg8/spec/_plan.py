"""Small planning helpers shared by the speculative worker overrides.

These wrap the "pre-plan out of forward" pattern SGLang's EAGLE workers use
(``attn_backend.init_forward_metadata(fb)`` followed by
``fb.mark_forward_metadata_ready()``) so that our workers can plan on the
plan stream.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Iterator

from sglang.srt.utils.common import require_mlp_sync

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch
    from sglang.srt.model_executor.model_runner import ModelRunner


def plan_and_mark(
    attn_backend: "AttentionBackend",
    forward_batch: "ForwardBatch",
    *,
    replan_equivalent: bool = False,
) -> "ForwardBatch":
    """Plan ``forward_batch`` on ``attn_backend`` and record the plan."""
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return forward_batch


def pad_for_mlp_sync(
    forward_batch: "ForwardBatch", model_runner: "ModelRunner"
) -> "ForwardBatch":
    """Apply the DP-attention MLP-sync padding the eager forward would apply.

    ``ForwardBatch.prepare_mlp_sync_batch`` pads to the already-gathered
    ``global_num_tokens_cpu``; calling it again in ModelRunner._forward_raw
    pads to the same size, so doing it early is safe.
    """
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(model_runner)
    return forward_batch


def no_dp_padding_expected(forward_batch: "ForwardBatch") -> bool:
    """True when the forward path will not pad this batch for DP attention."""
    return forward_batch.global_num_tokens_cpu is None and not require_mlp_sync()


@contextlib.contextmanager
def preplanned(
    attn_backend: "AttentionBackend", forward_batch: "ForwardBatch"
) -> Iterator["ForwardBatch"]:
    """Plan + mark for the duration of the block, then drop the mark so a
    later reuse of the batch object plans again."""
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    try:
        yield forward_batch
    finally:
        forward_batch.forward_metadata_ready = False
