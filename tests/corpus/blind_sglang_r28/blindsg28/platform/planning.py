"""Shared planning / padding / execution helpers for the platform layer.

These are thin, generic building blocks; the decision of *when* to plan
relative to DP padding belongs to the callers.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


def preplan(
    attn_backend: Any,
    forward_batch: ForwardBatch,
    *,
    replan_equivalent: bool = False,
) -> bool:
    """Plan ``forward_batch`` on ``attn_backend`` and record the pre-plan."""
    if forward_batch.forward_mode.is_idle():
        return False
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return True


@contextlib.contextmanager
def preplanned(
    attn_backend: Any,
    forward_batch: ForwardBatch,
    *,
    replan_equivalent: bool = False,
) -> Iterator[bool]:
    """Context manager form of :func:`preplan` (logs the plan span)."""
    planned = preplan(
        attn_backend, forward_batch, replan_equivalent=replan_equivalent
    )
    try:
        yield planned
    finally:
        logger.info(
            "preplanned span closed: planned=%s bs=%s",
            planned,
            forward_batch.batch_size,
        )


def pad_for_dp(forward_batch: ForwardBatch, model_runner: ModelRunner) -> int:
    """Run the forward's own DP / MLP-sync padding ahead of an eager launch."""
    model_runner._prepare_eager_forward_batch(forward_batch)
    return forward_batch.batch_size


def run_eager(
    model_runner: ModelRunner,
    forward_batch: ForwardBatch,
    pp_proxy_tensors: Optional[Any] = None,
):
    """Launch an already padded batch on the eager runner and unpad after."""
    out = model_runner.eager_runner.execute(
        forward_batch, pp_proxy_tensors=pp_proxy_tensors
    )
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.post_forward_mlp_sync_batch(out)
    return out


def graph_can_run(model_runner: ModelRunner, forward_batch: ForwardBatch) -> bool:
    """Mirror of ModelRunner._forward_raw's decode-graph eligibility."""
    graph_runner = model_runner.decode_cuda_graph_runner
    return bool(
        forward_batch.forward_mode.is_cuda_graph()
        and graph_runner is not None
        and graph_runner.can_run_graph(forward_batch)
    )
