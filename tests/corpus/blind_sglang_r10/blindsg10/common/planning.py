"""Attention pre-planning helpers for hand-built speculative forward batches.

SGLang lets a pre-planner plan a batch outside ``ModelRunner.forward`` and
record that with ``ForwardBatch.mark_forward_metadata_ready``.  These helpers
keep the plan and the mark next to each other, as the upstream docstring asks.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Iterator, Sequence, Tuple

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch


@dataclasses.dataclass(frozen=True)
class PlanPolicy:
    """How a pre-planner marks the batch it just planned."""

    mark_ready: bool = True
    # True only where a forward-path re-plan is equivalent to the pre-plan
    # (same backend object, no special context).
    replan_equivalent: bool = True


DEFAULT_PLAN_POLICY = PlanPolicy()


def preplan(
    attn_backend, forward_batch: ForwardBatch, *, replan_equivalent: bool = False
) -> ForwardBatch:
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return forward_batch


def plan_unmarked(attn_backend, forward_batch: ForwardBatch) -> ForwardBatch:
    """Plan without claiming the batch: the forward path still plans it."""
    attn_backend.init_forward_metadata(forward_batch)
    return forward_batch


def apply_plan_policy(
    attn_backend,
    forward_batch: ForwardBatch,
    policy: PlanPolicy = DEFAULT_PLAN_POLICY,
) -> ForwardBatch:
    attn_backend.init_forward_metadata(forward_batch)
    if policy.mark_ready:
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=policy.replan_equivalent
        )
    return forward_batch


@contextlib.contextmanager
def preplanned(
    attn_backend,
    forward_batch: ForwardBatch,
    *,
    replan_equivalent: bool = False,
    label: str = "preplanned",
) -> Iterator[ForwardBatch]:
    """Plan + mark on entry; the body runs the forward inside an NVTX range."""
    torch.cuda.nvtx.range_push(label)
    try:
        preplan(attn_backend, forward_batch, replan_equivalent=replan_equivalent)
        yield forward_batch
    finally:
        torch.cuda.nvtx.range_pop()


def _bind_runner_pools(forward_batch: ForwardBatch, runner) -> None:
    forward_batch.req_to_token_pool = runner.req_to_token_pool
    forward_batch.token_to_kv_pool = runner.token_to_kv_pool


def iter_preplanned_steps(
    runners: Sequence, forward_batch: ForwardBatch
) -> Iterator[Tuple[int, object]]:
    """Yield ``(step, runner)`` with the batch bound to and planned for that
    step's runner (each de-tied MTP layer has its own backend)."""
    for step, runner in enumerate(runners):
        _bind_runner_pools(forward_batch, runner)
        if not forward_batch.forward_mode.is_idle():
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        yield step, runner


def iter_step_runners(
    runners: Sequence, forward_batch: ForwardBatch
) -> Iterator[Tuple[int, object]]:
    """Yield ``(step, runner)`` with only the pools rebound; planning is left
    to each step's forward."""
    for step, runner in enumerate(runners):
        _bind_runner_pools(forward_batch, runner)
        yield step, runner
