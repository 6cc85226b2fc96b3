"""Small planning helpers shared by the forked speculative workers.

None of these run a forward; they only plan attention metadata for a batch
and/or record the plan on the batch.  Whether that is safe depends on what the
caller does with the batch afterwards (see ForwardBatch.needs_forward_metadata_init).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Iterator, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def preplan_and_seal(attn_backend: Any, forward_batch: ForwardBatch) -> ForwardBatch:
    """Plan ``forward_batch`` on ``attn_backend`` and record the plan.

    The mark is the plain one: the forward path will not plan again.
    """
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return forward_batch


def preplan_replan_safe(attn_backend: Any, forward_batch: ForwardBatch) -> ForwardBatch:
    """Plan and mark, declaring that a forward-path re-plan is equivalent."""
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    return forward_batch


def seal(forward_batch: ForwardBatch) -> None:
    forward_batch.mark_forward_metadata_ready()


def unseal(forward_batch: ForwardBatch) -> None:
    """Drop a pre-plan record so the forward path plans the final shapes."""
    forward_batch.forward_metadata_ready = False
    forward_batch.forward_metadata_planned_bs = None
    forward_batch.forward_metadata_planned_num_tokens = None


@contextlib.contextmanager
def planned(
    attn_backend: Any, forward_batch: ForwardBatch, *, replan_equivalent: bool = False
) -> Iterator[ForwardBatch]:
    """Plan on enter; restore the caller's spec_info on exit."""
    saved_spec_info = forward_batch.spec_info
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    try:
        yield forward_batch
    finally:
        forward_batch.spec_info = saved_spec_info


@dataclasses.dataclass
class PlannedStep:
    """A batch planned once at construction time (see __post_init__)."""

    forward_batch: ForwardBatch
    attn_backend: Any
    replan_equivalent: bool = False
    step: int = 0

    def __post_init__(self):
        if self.forward_batch.forward_mode.is_idle():
            return
        self.attn_backend.init_forward_metadata(self.forward_batch)
        self.forward_batch.mark_forward_metadata_ready(
            replan_equivalent=self.replan_equivalent
        )


def iter_planned_steps(
    attn_backend: Any, forward_batch: ForwardBatch, num_steps: int
) -> Iterator[ForwardBatch]:
    """Plan once, then hand the same batch out for each draft step."""
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    for step in range(num_steps):
        forward_batch.positions.add_(1 if step else 0)
        yield forward_batch


def iter_unplanned_steps(
    forward_batch: ForwardBatch, num_steps: int
) -> Iterator[ForwardBatch]:
    """Hand the batch out per step without a pre-plan; the forward plans."""
    for step in range(num_steps):
        if step:
            forward_batch.positions.add_(1)
        yield forward_batch


def replan_after_pad(
    model_runner: Any, attn_backend: Any, forward_batch: ForwardBatch
) -> ForwardBatch:
    """Apply the DP/MLP-sync padding first, then plan the padded batch."""
    model_runner._prepare_eager_forward_batch(forward_batch)
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return forward_batch


def mark_kwargs(replan_safe: bool) -> dict:
    return {"replan_equivalent": replan_safe}


def resolve_forward_kwargs(
    forward_batch: ForwardBatch, *, legacy_skip: Optional[bool] = None
) -> dict:
    kwargs = {"forward_batch": forward_batch}
    if legacy_skip is not None:
        kwargs["skip_attn_backend_init"] = legacy_skip
    return kwargs
