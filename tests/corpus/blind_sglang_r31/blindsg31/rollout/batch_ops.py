"""Functional helpers over ForwardBatch.

The rollout team prefers not to mutate batches it did not create: helpers
return a new ForwardBatch via ``dataclasses.replace``. Note that ``replace``
copies every field, including SGLang's attention-planning record
(``forward_metadata_ready`` / ``forward_metadata_replan_equivalent`` /
planned shapes), so a replaced batch is "planned" iff its source was.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner


def with_input_ids(forward_batch: ForwardBatch, input_ids: torch.Tensor) -> ForwardBatch:
    return replace(forward_batch, input_ids=input_ids)


def with_positions(forward_batch: ForwardBatch, positions: torch.Tensor) -> ForwardBatch:
    return replace(forward_batch, positions=positions)


def preplan(forward_batch: ForwardBatch, attn_backend, *, replan: bool = False) -> ForwardBatch:
    """Plan attention metadata for ``forward_batch`` and record it as planned."""
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan)
    return forward_batch


def drop_plan_mark(forward_batch: ForwardBatch) -> ForwardBatch:
    """A copy the forward path will plan again (fresh planning record)."""
    return replace(
        forward_batch,
        forward_metadata_ready=False,
        forward_metadata_planned_bs=None,
        forward_metadata_planned_num_tokens=None,
        forward_metadata_replan_equivalent=False,
    )


def pad_for_dp(forward_batch: ForwardBatch, model_runner: "ModelRunner") -> ForwardBatch:
    """Apply SGLang's DP-attention padding now (no-op without MLP sync)."""
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(model_runner)
    return forward_batch


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; pre-plans the draft decode batch, swaps in the next draft tokens, runs draft_runner.forward
# expect: SG106
def advance_draft_tokens(
    draft_runner: "ModelRunner",
    draft_attn_backend,
    forward_batch: ForwardBatch,
    next_input_ids: torch.Tensor,
):
    planned = preplan(forward_batch, draft_attn_backend)
    # replace() keeps the planning record of ``planned``.
    stepped = with_input_ids(planned, next_input_ids)
    return draft_runner.forward(stepped).logits_output


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; same draft advance, but the mark opts into a post-pad re-plan
# expect: clean
def advance_draft_tokens_replannable(
    draft_runner: "ModelRunner",
    draft_attn_backend,
    forward_batch: ForwardBatch,
    next_input_ids: torch.Tensor,
):
    planned = preplan(forward_batch, draft_attn_backend, replan=True)
    stepped = with_input_ids(planned, next_input_ids)
    return draft_runner.forward(stepped).logits_output


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; plans for the tree-mask side buffers, then hands the forward an unmarked copy
# expect: clean
def rerun_with_fresh_plan(
    draft_runner: "ModelRunner",
    draft_attn_backend,
    forward_batch: ForwardBatch,
):
    planned = preplan(forward_batch, draft_attn_backend)
    # The plan above only fills the backend's host-side tree buffers; the
    # forward must build its own metadata for whatever shape it runs.
    fresh = drop_plan_mark(planned)
    return draft_runner.forward(fresh).logits_output


# idiom: model_executor/forward_batch_info.py prepare_mlp_sync_batch + eagle_worker_v2.py draft; pads for DP first, then plans and marks the padded batch
# expect: clean
def planned_decode_forward(
    draft_runner: "ModelRunner",
    draft_attn_backend,
    forward_batch: ForwardBatch,
):
    padded = pad_for_dp(forward_batch, draft_runner)
    planned = preplan(padded, draft_attn_backend)
    return draft_runner.forward(planned).logits_output


def runner_can_replay(model_runner: "ModelRunner", forward_batch: ForwardBatch) -> bool:
    """Whether ModelRunner.forward will take the decode-graph replay branch."""
    graph_runner = getattr(model_runner, "decode_cuda_graph_runner", None)
    return bool(
        forward_batch.forward_mode.is_cuda_graph()
        and graph_runner is not None
        and graph_runner.can_run_graph(forward_batch)
    )
