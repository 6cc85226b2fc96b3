"""Helpers for planning attention metadata outside ``ModelRunner.forward``.

``ForwardBatch.mark_forward_metadata_ready`` tells the forward path that the
batch was planned already.  The model runner's DP-attention padding
(``prepare_mlp_sync_batch``) runs *inside* ``ModelRunner.forward``, so whoever
plans outside it has to decide what happens to the plan once the batch grows.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context


@contextlib.contextmanager
def preplanned(
    attn_backend, forward_batch: ForwardBatch, *, replan_equivalent: bool = False
) -> Iterator[ForwardBatch]:
    """Plan ``forward_batch`` on ``attn_backend`` and mark it for the forward.

    Idle batches (DP attention rank without requests) carry nothing to plan.
    """
    if not forward_batch.forward_mode.is_idle():
        attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    yield forward_batch


# expect: SG106
def run_preplanned(model_runner, forward_batch: ForwardBatch, attn_backend=None):
    """Plan with ``attn_backend`` (default: the runner's) and run the forward
    without letting the runner plan a second time."""
    backend = attn_backend if attn_backend is not None else model_runner.attn_backend
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return model_runner.forward(forward_batch)


# expect: clean
def run_padded_then_planned(
    model_runner, forward_batch: ForwardBatch, attn_backend=None
):
    """Variant of :func:`run_preplanned` for DP attention: apply the MLP-sync
    padding first, plan the padded batch, then run the eager runner directly
    (``ModelRunner.forward`` would pad a second time)."""
    backend = attn_backend if attn_backend is not None else model_runner.attn_backend
    padded = forward_batch.global_num_tokens_cpu is not None
    if padded:
        forward_batch.prepare_mlp_sync_batch(model_runner)
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    with forward_context(
        ForwardContext(attn_backend=backend), forward_batch=forward_batch
    ):
        ret = model_runner.eager_runner.execute(forward_batch)
    if padded:
        forward_batch.post_forward_mlp_sync_batch(ret)
    return ret


def maybe_unmark(forward_batch: ForwardBatch, planned_bs: Optional[int]) -> None:
    """Drop a readiness mark whose plan no longer matches the batch size."""
    if planned_bs is not None and forward_batch.batch_size != planned_bs:
        forward_batch.forward_metadata_ready = False
