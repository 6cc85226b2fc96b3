"""Attention-metadata planning helpers shared by the fork's workers.

These mirror the out-of-forward planning that SGLang's EAGLE workers do
(``attn_backend.init_forward_metadata(fb)`` followed by
``fb.mark_forward_metadata_ready()``), factored so the plan-stream code and
the eager fallbacks share one spelling.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, List

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend

# What a plan-stream stage hands to the compute stream.
PlanRecord = namedtuple("PlanRecord", ["forward_batch", "replan_equivalent"])


@dataclass
class DraftExtendPlan:
    """A staged draft-extend forward batch and how it was planned."""

    forward_batch: ForwardBatch
    preplanned: bool
    replan_equivalent: bool = False


def plan_only(backend: AttentionBackend, forward_batch: ForwardBatch) -> None:
    """Plan without marking: the forward path still decides to plan again."""
    backend.init_forward_metadata(forward_batch)


def plan_and_mark(
    backend: AttentionBackend,
    forward_batch: ForwardBatch,
    replan_equivalent: bool = False,
) -> None:
    """Plan and record the plan on the batch (SGLang's pre-planner contract)."""
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)


def stage_draft_extend(
    backend: AttentionBackend,
    forward_batch: ForwardBatch,
    preplan: bool = True,
) -> ForwardBatch:
    """Plan-stream stage of the draft-extend batch (eagle_worker_common style)."""
    if preplan and not forward_batch.forward_mode.is_idle():
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return forward_batch


def stage_draft_extend_plan(
    backend: AttentionBackend,
    forward_batch: ForwardBatch,
    replan_equivalent: bool,
) -> DraftExtendPlan:
    """Plan the batch; leave the mark to the compute stream."""
    if forward_batch.forward_mode.is_idle():
        return DraftExtendPlan(forward_batch, preplanned=False)
    backend.init_forward_metadata(forward_batch)
    return DraftExtendPlan(
        forward_batch, preplanned=True, replan_equivalent=replan_equivalent
    )


def iter_planned(
    backend: AttentionBackend,
    forward_batches: List[ForwardBatch],
    mark: bool,
) -> Iterator[ForwardBatch]:
    """Yield each batch after its plan (and mark, if asked)."""
    for forward_batch in forward_batches:
        backend.init_forward_metadata(forward_batch)
        if mark:
            forward_batch.mark_forward_metadata_ready()
        yield forward_batch
