"""Pre-planning helpers shared by the fork's draft paths.

These run on the plan stream ahead of the draft forward so the host-side
planning overlaps the previous kernel launches.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner


def preplan_draft_batch(attn_backend: Any, forward_batch: ForwardBatch) -> ForwardBatch:
    """Plan ``forward_batch`` on ``attn_backend`` and record the plan.

    The forward will trust the plan and skip its own init.
    """
    if forward_batch.forward_mode.is_idle():
        return forward_batch
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return forward_batch


def preplan_if_rank_local(attn_backend: Any, forward_batch: ForwardBatch) -> bool:
    """Pre-plan only a batch that the DP sync will not reshape.

    A batch that carries ``global_num_tokens_cpu`` is padded by
    ``prepare_mlp_sync_batch`` inside ``ModelRunner.forward``; leave it
    unplanned so the forward plans the padded shape itself.
    """
    if forward_batch.global_num_tokens_cpu is not None:
        return False
    if forward_batch.forward_mode.is_idle():
        return False
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return True


def preplan_replannable(model_runner: "ModelRunner", forward_batch: ForwardBatch) -> ForwardBatch:
    """Plan on the runner's own backend; a post-pad re-plan is equivalent."""
    model_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    return forward_batch


def make_preplanned_forward(model_runner: "ModelRunner") -> Callable[..., Any]:
    """Forward callable for batches the caller already planned."""
    return functools.partial(model_runner.forward, skip_attn_backend_init=True)


def make_forward(model_runner: "ModelRunner") -> Callable[..., Any]:
    """Forward callable that lets ``ModelRunner.forward`` decide on planning."""
    return functools.partial(model_runner.forward)


def run_eager(model_runner: "ModelRunner", forward_batch: ForwardBatch):
    """Eager forward through the runner; returns the logits output."""
    return model_runner.forward(forward_batch).logits_output
