"""Module-level draft-extend steps (functional port of
``eagle_worker_common.prepare_for_draft_extend`` + the draft-extend forward).

Each step takes the schedule batch, the draft ModelRunner and the accepted
tokens explicitly and returns the draft logits.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg41.common.plan_utils import (
    MARK_OPTIONS,
    new_draft_extend_batch,
    pad_then_plan,
    plan_and_mark,
    plan_and_mark_unpadded,
    planned,
    planned_lazily,
    run_forward,
)


# expect: SG106
def run_draft_extend(
    batch: ScheduleBatch, runner: ModelRunner, predict: torch.Tensor, num_tokens: int
):
    forward_batch = new_draft_extend_batch(batch, runner, predict, num_tokens)
    forward_batch, _ = plan_and_mark(runner.attn_backend, forward_batch)
    return run_forward(runner, forward_batch)


# expect: clean
def run_draft_extend_opts(
    batch: ScheduleBatch, runner: ModelRunner, predict: torch.Tensor, num_tokens: int
):
    forward_batch = new_draft_extend_batch(batch, runner, predict, num_tokens)
    forward_batch, _ = plan_and_mark(
        runner.attn_backend, forward_batch, **MARK_OPTIONS["replannable"]
    )
    return run_forward(runner, forward_batch)


# expect: SG106
def run_draft_extend_named_opts(
    batch: ScheduleBatch, runner: ModelRunner, predict: torch.Tensor, num_tokens: int
):
    forward_batch = new_draft_extend_batch(batch, runner, predict, num_tokens)
    options = MARK_OPTIONS["pinned"]
    forward_batch, _ = plan_and_mark(runner.attn_backend, forward_batch, **options)
    return run_forward(runner, forward_batch)


# expect: clean
def run_draft_extend_sync_first(
    batch: ScheduleBatch, runner: ModelRunner, predict: torch.Tensor, num_tokens: int
):
    forward_batch = new_draft_extend_batch(batch, runner, predict, num_tokens)
    forward_batch, _ = pad_then_plan(runner, runner.attn_backend, forward_batch)
    return run_forward(runner, forward_batch)


# expect: SG106
def run_draft_extend_record(
    batch: ScheduleBatch, runner: ModelRunner, predict: torch.Tensor, num_tokens: int
):
    record = planned(
        runner.attn_backend,
        new_draft_extend_batch(batch, runner, predict, num_tokens),
    )
    return run_forward(runner, record.batch)


# expect: clean
def run_draft_extend_record_only(
    batch: ScheduleBatch, runner: ModelRunner, predict: torch.Tensor, num_tokens: int
):
    record = planned_lazily(
        runner.attn_backend,
        new_draft_extend_batch(batch, runner, predict, num_tokens),
    )
    return run_forward(runner, record.batch)


# expect: SG106
def run_draft_extend_or_idle(
    batch: ScheduleBatch, runner: ModelRunner, predict: torch.Tensor, num_tokens: int
) -> Optional[Any]:
    forward_batch = new_draft_extend_batch(batch, runner, predict, num_tokens)
    if forward_batch.forward_mode.is_idle():
        return run_forward(runner, forward_batch)
    runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    if forward_batch.global_num_tokens_cpu is None:
        return run_forward(runner, forward_batch)
    # DP attention: the gathered batch goes through the same forward.
    logits_output = run_forward(runner, forward_batch)
    return logits_output


# expect: clean
def run_draft_extend_helper(
    batch: ScheduleBatch, runner: ModelRunner, predict: torch.Tensor, num_tokens: int
):
    forward_batch = new_draft_extend_batch(batch, runner, predict, num_tokens)
    if forward_batch.forward_mode.is_idle():
        return run_forward(runner, forward_batch)
    forward_batch, _marked = plan_and_mark_unpadded(runner.attn_backend, forward_batch)
    return run_forward(runner, forward_batch)
