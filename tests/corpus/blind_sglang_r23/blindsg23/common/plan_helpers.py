"""Small helpers around attention planning and DP padding.

Kept deliberately thin so the workers read like upstream; the callers decide
whether a pre-plan is marked and whether the forward may re-plan.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from typing import Callable, Iterator, Optional

from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


def plan_batch(backend: AttentionBackend, forward_batch: ForwardBatch) -> bool:
    """Plan ``forward_batch`` on ``backend``; idle batches have nothing to plan."""
    if forward_batch.forward_mode.is_idle():
        return False
    backend.init_forward_metadata(forward_batch)
    return True


def plan_and_mark(
    backend: AttentionBackend,
    forward_batch: ForwardBatch,
    *,
    replan_equivalent: bool = False,
) -> bool:
    """Plan out of the forward and record it on the batch."""
    if not plan_batch(backend, forward_batch):
        return False
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return True


def dp_sync_active(forward_batch: ForwardBatch) -> bool:
    """Whether the batch carries a DP-attention token gather (and will be padded)."""
    return forward_batch.global_num_tokens_cpu is not None


def pad_for_dp(model_runner: ModelRunner, forward_batch: ForwardBatch) -> bool:
    """Apply the DP / MLP-sync padding the eager forward would apply."""
    if forward_batch.global_num_tokens_cpu is None:
        return False
    forward_batch.prepare_mlp_sync_batch(model_runner)
    return True


def unpad_after_dp(forward_batch: ForwardBatch, logits_output):
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.post_forward_mlp_sync_batch(logits_output)
    return logits_output


@contextlib.contextmanager
def preplanned_phase(
    backend: AttentionBackend,
    forward_batch: ForwardBatch,
    *,
    replan_equivalent: bool = False,
) -> Iterator[ForwardBatch]:
    """Plan + mark on entry; log the phase duration on exit."""
    start = time.perf_counter()
    plan_and_mark(backend, forward_batch, replan_equivalent=replan_equivalent)
    try:
        yield forward_batch
    finally:
        logger.debug(
            "preplanned phase bs=%s took %.3f ms",
            forward_batch.batch_size,
            (time.perf_counter() - start) * 1e3,
        )


def phase_timer(name: str) -> Callable:
    """Decorator: time a worker phase (debug logging only)."""

    def deco(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                logger.debug("%s: %.3f ms", name, (time.perf_counter() - start) * 1e3)

        return wrapped

    return deco


def maybe_log_shapes(enabled: bool, tag: str, forward_batch: Optional[ForwardBatch]):
    if enabled and forward_batch is not None:
        logger.info(
            "%s: bs=%s mode=%s", tag, forward_batch.batch_size, forward_batch.forward_mode
        )
