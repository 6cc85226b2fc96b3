"""Planning helpers shared by the fork's draft / draft-extend paths.

These wrap the out-of-forward planning idiom from
``sglang.srt.speculative.eagle_worker_common.prepare_for_draft_extend``:
plan the draft attention backend for the batch, then mark the batch so that
``ModelRunner.forward`` does not plan it a second time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Callable, Iterator, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel


def preplan_and_mark(attn_backend, forward_batch: ForwardBatch) -> ForwardBatch:
    """Plan ``forward_batch`` on ``attn_backend`` and mark it ready."""
    if forward_batch.forward_mode.is_idle():
        return forward_batch
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return forward_batch


def preplan_only(attn_backend, forward_batch: ForwardBatch) -> ForwardBatch:
    """Plan without marking; the forward path re-plans on its own."""
    if not forward_batch.forward_mode.is_idle():
        attn_backend.init_forward_metadata(forward_batch)
    return forward_batch


def preplan_replannable(attn_backend, forward_batch: ForwardBatch) -> ForwardBatch:
    """Plan and mark, letting the forward path re-plan if DP padding reshapes."""
    if not forward_batch.forward_mode.is_idle():
        attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    return forward_batch


@contextlib.contextmanager
def preplanned(attn_backend, forward_batch: ForwardBatch) -> Iterator[ForwardBatch]:
    """Scope in which ``forward_batch`` carries a pre-built plan."""
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    try:
        yield forward_batch
    finally:
        # Never leak the mark to a later reuse of this batch object.
        forward_batch.forward_metadata_ready = False


@contextlib.contextmanager
def planned_after_mlp_sync(
    model_runner, attn_backend, forward_batch: ForwardBatch
) -> Iterator[ForwardBatch]:
    """Pad for DP attention first, then plan the padded batch and mark it."""
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(model_runner)
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    yield forward_batch


def iter_preplanned_steps(
    attn_backend, forward_batch: ForwardBatch, num_steps: int
) -> Iterator[ForwardBatch]:
    """Yield the batch once per draft step, planned and marked each time."""
    for step in range(num_steps):
        forward_batch.spec_step = step
        attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        yield forward_batch


def iter_unmarked_steps(
    attn_backend, forward_batch: ForwardBatch, num_steps: int
) -> Iterator[ForwardBatch]:
    """Yield the batch once per draft step; planning is left to the forward."""
    for step in range(num_steps):
        forward_batch.spec_step = step
        yield forward_batch


@dataclasses.dataclass(frozen=True)
class DraftExtendPlanConfig:
    """How the fork pre-plans a draft-extend batch."""

    preplan: bool = True
    mark_ready: bool = True
    replan_equivalent: bool = False


DEFAULT_DRAFT_EXTEND_PLAN = DraftExtendPlanConfig()


def mark_per_config(forward_batch: ForwardBatch, cfg: DraftExtendPlanConfig) -> None:
    if cfg.mark_ready:
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=cfg.replan_equivalent
        )


mark_replannable: Callable[[ForwardBatch], None] = functools.partial(
    ForwardBatch.mark_forward_metadata_ready, replan_equivalent=True
)


def dp_attention_enabled() -> bool:
    return bool(get_parallel().attn_dp_enabled)


def pick_attn_backend(worker, step: Optional[int] = None):
    if step is None:
        return worker.draft_runner.attn_backend
    return worker.draft_extend_attn_backend_list[step]
