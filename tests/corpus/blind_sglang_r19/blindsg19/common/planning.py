"""Small helpers shared by the fork's speculative workers for out-of-forward
attention planning (pre-planning a batch on the host before its forward)."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


def plan_and_mark(
    forward_batch: ForwardBatch,
    backend: "AttentionBackend",
    *,
    replan_equivalent: bool = False,
) -> ForwardBatch:
    """Plan ``forward_batch`` on ``backend`` and record that it was planned, so
    the runner's forward does not plan it a second time."""
    if forward_batch.forward_mode.is_idle():
        return forward_batch
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return forward_batch


@contextlib.contextmanager
def preplanned(
    forward_batch: ForwardBatch,
    backend: "AttentionBackend",
    *,
    replan_equivalent: bool = False,
) -> Iterator[ForwardBatch]:
    """Context manager form of :func:`plan_and_mark`.

    On exit the batch keeps its mark; callers that reuse the batch for a
    second forward re-enter the context.
    """
    plan_and_mark(forward_batch, backend, replan_equivalent=replan_equivalent)
    try:
        yield forward_batch
    finally:
        logger.debug(
            "preplanned batch bs=%d ready=%s",
            forward_batch.batch_size,
            forward_batch.forward_metadata_ready,
        )


class PreplanMixin:
    """Mixin for draft workers that plan their draft-extend batch themselves.

    Expects ``self.draft_runner`` (a ModelRunner) on the host class.
    """

    draft_runner: "ModelRunner"

    def _preplan(
        self,
        forward_batch: ForwardBatch,
        backend: Optional["AttentionBackend"] = None,
    ) -> None:
        backend = backend or self.draft_runner.attn_backend
        if forward_batch.forward_mode.is_idle():
            return
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()


@dataclass
class DraftStepPlan:
    """One planned draft step: the batch, the backend that planned it, and
    whether the forward may re-plan it after reshaping."""

    forward_batch: ForwardBatch
    backend: "AttentionBackend"
    replan_equivalent: bool = False
    applied: bool = field(default=False, init=False)

    def apply(self) -> ForwardBatch:
        if not self.applied:
            self.backend.init_forward_metadata(self.forward_batch)
            self.forward_batch.mark_forward_metadata_ready(
                replan_equivalent=self.replan_equivalent
            )
            self.applied = True
        return self.forward_batch


class DraftBatchPlanner:
    """Stateful planner object handed to workers; keeps a count of host-side
    plans for the step-time metrics."""

    def __init__(self, backend: "AttentionBackend"):
        self.backend = backend
        self.num_plans = 0

    def plan(self, forward_batch: ForwardBatch) -> None:
        self.backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        self.num_plans += 1

    def plan_replannable(self, forward_batch: ForwardBatch) -> None:
        self.backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        self.num_plans += 1
