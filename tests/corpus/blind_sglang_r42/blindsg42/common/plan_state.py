"""Small planning helpers shared by the fork's speculative workers.

The workers in ``blindsg42.spec`` pre-plan attention metadata outside
``ModelRunner.forward`` (draft extend on the plan stream, multi-step draft
decode) and hand the planned ``ForwardBatch`` to the runner. These helpers
keep the "plan, then record the plan on the batch" pair in one place.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, List, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


class PrePlanMixin:
    """Mixin for draft workers that plan a batch before handing it over."""

    _preplan_count: int = 0

    def _preplan_and_mark(
        self,
        forward_batch: ForwardBatch,
        attn_backend: Any,
        *,
        replan_equivalent: bool = False,
    ) -> ForwardBatch:
        if forward_batch.forward_mode.is_idle():
            return forward_batch
        attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
        self._preplan_count += 1
        return forward_batch


class PrePlanner:
    """Callable bound to one backend: plans a batch and records the plan."""

    def __init__(self, attn_backend: Any, *, replan_equivalent: bool = False):
        self.attn_backend = attn_backend
        self.replan_equivalent = replan_equivalent
        self.num_planned = 0

    def __call__(self, forward_batch: ForwardBatch) -> ForwardBatch:
        if forward_batch.forward_mode.is_idle():
            return forward_batch
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=self.replan_equivalent
        )
        self.num_planned += 1
        return forward_batch


@dataclass
class StagedBatch:
    """A forward batch staged by one worker step and consumed by the next."""

    forward_batch: ForwardBatch
    can_run_cuda_graph: bool
    select_index: Optional[torch.Tensor] = None
    planned: bool = False
    notes: List[str] = field(default_factory=list)


def runner_attn_backend(model_runner: "ModelRunner") -> Any:
    """The backend ``ModelRunner.forward`` itself plans with."""
    return model_runner.attn_backend
