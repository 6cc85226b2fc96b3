"""Small planning helpers shared by the fork's draft workers.

None of these decide *when* a batch is padded for DP attention; the callers do.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, List, Optional, Tuple

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

logger = logging.getLogger(__name__)


@dataclass
class DraftStepPlan:
    """One planned draft step: the batch, the backend that planned it and
    whether the plan was recorded on the batch."""

    batch: ForwardBatch
    backend: Any
    step: int = 0
    planned: bool = False
    replan_equivalent: bool = False
    notes: List[str] = field(default_factory=list)

    def commit(self) -> ForwardBatch:
        self.backend.init_forward_metadata(self.batch)
        self.batch.mark_forward_metadata_ready(
            replan_equivalent=self.replan_equivalent
        )
        self.planned = True
        return self.batch




def pad_for_dp(forward_batch: ForwardBatch, model_runner: Any) -> ForwardBatch:
    """Run the DP-attention / MLP-sync padding the model runner would run."""
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(model_runner)
    else:
        forward_batch.prepare_attn_tp_scatter_input(model_runner)
    return forward_batch


@contextlib.contextmanager
def planned_batch(
    backend: Any, forward_batch: ForwardBatch, *, replan_equivalent: bool = False
) -> Iterator[ForwardBatch]:
    """Plan on enter; the body runs the forward(s)."""
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    try:
        yield forward_batch
    finally:
        logger.debug("planned_batch: leaving bs=%s", forward_batch.batch_size)


@contextlib.contextmanager
def unplanned_on_exit(forward_batch: ForwardBatch) -> Iterator[ForwardBatch]:
    """Drop any readiness mark when the body leaves, so a later reuse of the
    same ForwardBatch object is planned again."""
    try:
        yield forward_batch
    finally:
        forward_batch.forward_metadata_ready = False


def iter_planned_steps(
    backends: List[Any], forward_batch: ForwardBatch, num_steps: int
) -> Iterator[Tuple[int, ForwardBatch]]:
    """Yield ``(step, batch)`` with the batch planned on that step's backend."""
    for i in range(num_steps):
        backends[i].init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        yield i, forward_batch


def iter_unmarked_steps(
    num_steps: int, forward_batch: ForwardBatch
) -> Iterator[Tuple[int, ForwardBatch]]:
    """Yield ``(step, batch)``; each consumer forward plans for itself."""
    for i in range(num_steps):
        forward_batch.forward_metadata_ready = False
        yield i, forward_batch
