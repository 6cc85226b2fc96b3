"""Draft KV refill after a HiCache reload.

When the target's KV for a request is reloaded from host memory but the draft
model's KV was not kept, the fork re-runs the draft model over the reloaded
tokens as one EXTEND forward.  These entry points are called from the fork's
scheduler mixin; they differ in how the refill batch gets planned.

Under DP attention ``ModelRunner.forward`` pads an EXTEND batch to the
rank-synchronised token count before deciding whether to plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg20.common.planning import (
    DraftStepPlan,
    DraftStepPlanner,
    batch_will_pad,
    pad_for_mlp_sync,
    padded_preplan,
    plan_and_mark,
    preplanned,
)
from blindsg20.spec._builders import build_draft_refill_batch

if TYPE_CHECKING:
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput


# expect: SG106
def refill_draft_kv(
    draft_runner: ModelRunner,
    batch: ScheduleBatch,
    hidden_states: Optional[torch.Tensor],
) -> LogitsProcessorOutput:
    forward_batch = build_draft_refill_batch(batch, draft_runner, hidden_states)
    if forward_batch.forward_mode.is_idle():
        return draft_runner.forward(forward_batch).logits_output
    plan_and_mark(draft_runner.attn_backend, forward_batch)
    return draft_runner.forward(forward_batch).logits_output


# expect: clean
def refill_draft_kv_replannable(
    draft_runner: ModelRunner,
    batch: ScheduleBatch,
    hidden_states: Optional[torch.Tensor],
) -> LogitsProcessorOutput:
    forward_batch = build_draft_refill_batch(batch, draft_runner, hidden_states)
    if forward_batch.forward_mode.is_idle():
        return draft_runner.forward(forward_batch).logits_output
    # The runner's own backend: a post-pad re-plan is equivalent.
    plan_and_mark(draft_runner.attn_backend, forward_batch, replan_equivalent=True)
    return draft_runner.forward(forward_batch).logits_output


# expect: SG106
def refill_draft_kv_scoped(
    draft_runner: ModelRunner,
    batch: ScheduleBatch,
    hidden_states: Optional[torch.Tensor],
) -> LogitsProcessorOutput:
    forward_batch = build_draft_refill_batch(batch, draft_runner, hidden_states)
    with preplanned(draft_runner.attn_backend, forward_batch):
        output = draft_runner.forward(forward_batch)
    return output.logits_output


# expect: clean
def refill_draft_kv_padded_scope(
    draft_runner: ModelRunner,
    batch: ScheduleBatch,
    hidden_states: Optional[torch.Tensor],
) -> LogitsProcessorOutput:
    forward_batch = build_draft_refill_batch(batch, draft_runner, hidden_states)
    with padded_preplan(draft_runner.attn_backend, forward_batch, draft_runner):
        output = draft_runner.forward(forward_batch)
    return output.logits_output


# expect: SG106
def refill_draft_kv_planned(
    draft_runner: ModelRunner,
    batch: ScheduleBatch,
    hidden_states: Optional[torch.Tensor],
) -> LogitsProcessorOutput:
    pending = DraftStepPlan(
        forward_batch=build_draft_refill_batch(batch, draft_runner, hidden_states),
        attn_backend=draft_runner.attn_backend,
    )
    forward_batch = pending.commit()
    return draft_runner.forward(forward_batch).logits_output


# expect: clean
def refill_draft_kv_planned_replannable(
    draft_runner: ModelRunner,
    batch: ScheduleBatch,
    hidden_states: Optional[torch.Tensor],
) -> LogitsProcessorOutput:
    pending = DraftStepPlan(
        forward_batch=build_draft_refill_batch(batch, draft_runner, hidden_states),
        attn_backend=draft_runner.attn_backend,
        replan_equivalent=True,
    )
    forward_batch = pending.commit()
    return draft_runner.forward(forward_batch).logits_output


# expect: SG106
def refill_draft_kv_chunked(
    draft_runner: ModelRunner,
    sub_batches: List[ScheduleBatch],
    hidden_states: List[Optional[torch.Tensor]],
) -> List[LogitsProcessorOutput]:
    """Refill in request chunks (bounded activation memory on long reloads)."""
    outputs = []
    for sub_batch, sub_hidden in zip(sub_batches, hidden_states):
        forward_batch = build_draft_refill_batch(sub_batch, draft_runner, sub_hidden)
        if not forward_batch.forward_mode.is_idle():
            draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        outputs.append(draft_runner.forward(forward_batch).logits_output)
    return outputs


# expect: clean
def refill_draft_kv_chunked_padded(
    draft_runner: ModelRunner,
    sub_batches: List[ScheduleBatch],
    hidden_states: List[Optional[torch.Tensor]],
) -> List[LogitsProcessorOutput]:
    outputs = []
    for sub_batch, sub_hidden in zip(sub_batches, hidden_states):
        forward_batch = build_draft_refill_batch(sub_batch, draft_runner, sub_hidden)
        if not forward_batch.forward_mode.is_idle():
            pad_for_mlp_sync(forward_batch, draft_runner)
            draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        outputs.append(draft_runner.forward(forward_batch).logits_output)
    return outputs


# expect: SG106
def refill_or_replay(
    draft_runner: ModelRunner,
    batch: ScheduleBatch,
    hidden_states: Optional[torch.Tensor],
) -> LogitsProcessorOutput:
    forward_batch = build_draft_refill_batch(batch, draft_runner, hidden_states)
    graph_runner = draft_runner.prefill_cuda_graph_runner
    if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
        return draft_runner.forward(forward_batch).logits_output
    if forward_batch.forward_mode.is_idle():
        return draft_runner.forward(forward_batch).logits_output
    draft_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return draft_runner.forward(forward_batch).logits_output


# expect: clean
def refill_or_replay_unplanned(
    draft_runner: ModelRunner,
    batch: ScheduleBatch,
    hidden_states: Optional[torch.Tensor],
) -> LogitsProcessorOutput:
    forward_batch = build_draft_refill_batch(batch, draft_runner, hidden_states)
    graph_runner = draft_runner.prefill_cuda_graph_runner
    if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
        return draft_runner.forward(forward_batch).logits_output
    # Eager: ModelRunner.forward plans after its own DP padding.
    return draft_runner.forward(forward_batch).logits_output


# expect: clean
def refill_with_final_plan(
    draft_runner: ModelRunner,
    batch: ScheduleBatch,
    hidden_states: Optional[torch.Tensor],
) -> LogitsProcessorOutput:
    forward_batch = build_draft_refill_batch(batch, draft_runner, hidden_states)
    if forward_batch.forward_mode.is_idle():
        return draft_runner.forward(forward_batch).logits_output
    backend = draft_runner.attn_backend
    # Plan once up front so a malformed extend layout raises before this rank
    # enters the DP collectives; re-plan if MLP sync reshapes the batch.
    backend.init_forward_metadata(forward_batch)
    if batch_will_pad(forward_batch):
        pad_for_mlp_sync(forward_batch, draft_runner)
        backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return draft_runner.forward(forward_batch).logits_output


class DraftRefiller:
    """Refill entry bound to one draft runner (kept by the scheduler mixin)."""

    def __init__(self, draft_runner: ModelRunner):
        self.draft_runner = draft_runner
        self.step_planner = DraftStepPlanner(
            draft_runner.attn_backend, replan_equivalent=False
        )

    # expect: SG106
    def refill(
        self, batch: ScheduleBatch, hidden_states: Optional[torch.Tensor]
    ) -> LogitsProcessorOutput:
        forward_batch = build_draft_refill_batch(batch, self.draft_runner, hidden_states)
        if not forward_batch.forward_mode.is_idle():
            self.step_planner.prepare(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output


class ReplannableDraftRefiller:
    """DraftRefiller whose planner lets the forward re-plan after padding."""

    def __init__(self, draft_runner: ModelRunner):
        self.draft_runner = draft_runner
        self.step_planner = DraftStepPlanner(
            draft_runner.attn_backend, replan_equivalent=True
        )

    # expect: clean
    def refill(
        self, batch: ScheduleBatch, hidden_states: Optional[torch.Tensor]
    ) -> LogitsProcessorOutput:
        forward_batch = build_draft_refill_batch(batch, self.draft_runner, hidden_states)
        if not forward_batch.forward_mode.is_idle():
            self.step_planner.prepare(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output
