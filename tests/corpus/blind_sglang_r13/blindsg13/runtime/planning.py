"""Out-of-forward attention planning helpers.

The spec workers in this fork sometimes plan a draft batch's attention
metadata outside ``ModelRunner.forward`` (plan stream, multi-step wrappers).
These helpers keep the planning / DP-padding / forward steps in one place.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.utils.common import require_mlp_sync

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------
# Small building blocks (unlabelled helpers; correct on their own).
# ---------------------------------------------------------------------------


def preplan_and_mark(
    backend: "AttentionBackend",
    forward_batch: ForwardBatch,
    *,
    replan_equivalent: bool = False,
) -> ForwardBatch:
    """Plan ``forward_batch`` on ``backend`` and record the plan on the batch."""
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return forward_batch


def pad_for_dp(model_runner: "ModelRunner", forward_batch: ForwardBatch) -> None:
    """Run the DP-attention MLP-sync padding the runner would run itself."""
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(model_runner)


def run_draft_forward(model_runner: "ModelRunner", forward_batch: ForwardBatch):
    """Eager draft forward; returns the logits output only."""
    return model_runner.forward(forward_batch).logits_output


@contextlib.contextmanager
def premarked(
    backend: "AttentionBackend", forward_batch: ForwardBatch
) -> Iterator[ForwardBatch]:
    """Plan + mark on enter. The mark stays on the batch after exit."""
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    yield forward_batch


@contextlib.contextmanager
def scoped_plan(
    backend: "AttentionBackend", forward_batch: ForwardBatch
) -> Iterator[ForwardBatch]:
    """Plan + mark for the duration of the block only.

    Used by side computations (indexer warmup, logging) that read the planned
    metadata. On exit the mark is dropped so a later forward plans again.
    """
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    try:
        yield forward_batch
    finally:
        forward_batch.forward_metadata_ready = False
        forward_batch.forward_metadata_planned_bs = None
        forward_batch.forward_metadata_planned_num_tokens = None


@dataclass
class DraftExtendPlan:
    """A draft-extend batch together with the backend that plans it."""

    forward_batch: ForwardBatch
    backend: Any
    replan_equivalent: bool = False
    primed: bool = field(default=False, init=False)

    def prime(self) -> ForwardBatch:
        if self.forward_batch.forward_mode.is_idle():
            return self.forward_batch
        self.backend.init_forward_metadata(self.forward_batch)
        self.forward_batch.mark_forward_metadata_ready(
            replan_equivalent=self.replan_equivalent
        )
        self.primed = True
        return self.forward_batch


# ---------------------------------------------------------------------------
# Module-level entry points used by the workers.
# ---------------------------------------------------------------------------


# expect: SG106
def run_preplanned_draft_extend(
    model_runner: "ModelRunner", forward_batch: ForwardBatch
):
    """Plan-stream style draft extend: plan early, forward later."""
    if not forward_batch.forward_mode.is_idle():
        preplan_and_mark(model_runner.attn_backend, forward_batch)
    return run_draft_forward(model_runner, forward_batch)


# expect: clean
def run_replan_equivalent_draft_extend(
    model_runner: "ModelRunner", forward_batch: ForwardBatch
):
    """Same as above, but the pre-plan is declared equivalent to a forward-path
    plan, so a DP-padded batch is planned again inside forward."""
    if not forward_batch.forward_mode.is_idle():
        preplan_and_mark(
            model_runner.attn_backend, forward_batch, replan_equivalent=True
        )
    return run_draft_forward(model_runner, forward_batch)


# expect: clean
def run_padded_then_planned(model_runner: "ModelRunner", forward_batch: ForwardBatch):
    """Pad for DP attention first, then plan the padded batch."""
    pad_for_dp(model_runner, forward_batch)
    if not forward_batch.forward_mode.is_idle():
        preplan_and_mark(model_runner.attn_backend, forward_batch)
    return run_draft_forward(model_runner, forward_batch)


# expect: SG106
def run_with_explicit_pad(model_runner: "ModelRunner", forward_batch: ForwardBatch):
    """Plan, then pad here (so hidden-state buffers can be sized), then run."""
    backend = model_runner.attn_backend
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    pad_for_dp(model_runner, forward_batch)
    num_padded = forward_batch.input_ids.shape[0]
    logger.debug("draft extend padded to %d tokens", num_padded)
    return model_runner.forward(forward_batch)


# expect: clean
def run_with_replan_after_pad(
    model_runner: "ModelRunner", forward_batch: ForwardBatch
):
    """Plan early (to overlap with the target), pad, and plan again."""
    backend = model_runner.attn_backend
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    pad_for_dp(model_runner, forward_batch)
    # The batch may have grown: the early plan describes the real batch only.
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return model_runner.forward(forward_batch)


# expect: clean
def run_plan_if_needed(model_runner: "ModelRunner", forward_batch: ForwardBatch):
    """Pad, then ask the batch itself whether it still needs a plan."""
    pad_for_dp(model_runner, forward_batch)
    if forward_batch.needs_forward_metadata_init():
        model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return model_runner.forward(forward_batch)


# expect: clean
def run_model_body_directly(
    model_runner: "ModelRunner", forward_batch: ForwardBatch
) -> torch.Tensor:
    """Graph-capture style body: plan + run the model module directly.

    Mirrors the ``run_once`` closures of the cuda-graph runners, which call the
    model module (no DP padding, no planning decision).
    """
    model_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return model_runner.model.forward(
        forward_batch.input_ids, forward_batch.positions, forward_batch
    )


# expect: clean
def run_marked_only_without_dp(
    model_runner: "ModelRunner", forward_batch: ForwardBatch
):
    """Only pre-plan when no MLP sync (so no DP padding) will happen."""
    if not require_mlp_sync() and not forward_batch.forward_mode.is_idle():
        model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return model_runner.forward(forward_batch)


def forward_with_logging(
    model_runner: "ModelRunner", forward_batch: ForwardBatch, tag: Optional[str] = None
):
    """Forward with a debug line (no planning involved)."""
    out = model_runner.forward(forward_batch)
    if tag is not None:
        logger.debug("%s: bs=%d", tag, forward_batch.batch_size)
    return out
