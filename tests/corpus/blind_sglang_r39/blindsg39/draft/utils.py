"""Shared planning helpers for the fork's speculative workers.

Values travel out of here as small records (``PlannedDraftBatch``,
``DraftPlanRecord``) so the workers do not have to know which backend planned
what.  DP attention is read through :func:`dp_attention_enabled`, a
module-level getter over the published server args.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, NamedTuple, Optional

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.runtime_context import get_server_args
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft

logger = logging.getLogger(__name__)


def dp_attention_enabled() -> bool:
    """Whether this process runs data-parallel attention (MLP sync padding)."""
    server_args = get_server_args()
    return bool(getattr(server_args, "enable_dp_attention", False))


class PlannedDraftBatch(NamedTuple):
    forward_batch: ForwardBatch
    can_run_cuda_graph: bool
    kv_loc_plan: Optional[Any]


@dataclass
class DraftPlanRecord:
    """What a pre-planner did to a batch, handed to ``apply_plan_record``."""

    forward_batch: ForwardBatch
    replan_equivalent: bool = False
    planned: bool = False
    extras: Dict[str, Any] = field(default_factory=dict)


def plan_and_mark(attn_backend, forward_batch: ForwardBatch, replan_equivalent=False):
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return forward_batch


def plan_only(attn_backend, forward_batch: ForwardBatch) -> ForwardBatch:
    attn_backend.init_forward_metadata(forward_batch)
    return forward_batch


def build_mark_kwargs(dp_padding_possible: bool) -> Dict[str, bool]:
    return {"replan_equivalent": bool(dp_padding_possible)}


def apply_plan_record(record: DraftPlanRecord, attn_backend) -> ForwardBatch:
    fb = record.forward_batch
    if fb.forward_mode.is_idle():
        return fb
    attn_backend.init_forward_metadata(fb)
    fb.mark_forward_metadata_ready(replan_equivalent=record.replan_equivalent)
    record.planned = True
    return fb


def plan_draft_decode(
    draft_input,
    req_to_token_pool,
    batch: ScheduleBatch,
    cuda_graph_runner,
    draft_runner,
    draft_attn_backend,
    topk: int,
    num_steps: int,
) -> PlannedDraftBatch:
    forward_batch, can_run_cuda_graph, kv_loc_plan = prepare_for_draft(
        draft_input,
        req_to_token_pool,
        batch,
        cuda_graph_runner,
        draft_runner,
        topk,
        num_steps,
    )
    if not can_run_cuda_graph and not forward_batch.forward_mode.is_idle():
        draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return PlannedDraftBatch(forward_batch, bool(can_run_cuda_graph), kv_loc_plan)


def plan_draft_decode_replannable(
    draft_input,
    req_to_token_pool,
    batch: ScheduleBatch,
    cuda_graph_runner,
    draft_runner,
    draft_attn_backend,
    topk: int,
    num_steps: int,
) -> PlannedDraftBatch:
    forward_batch, can_run_cuda_graph, kv_loc_plan = prepare_for_draft(
        draft_input,
        req_to_token_pool,
        batch,
        cuda_graph_runner,
        draft_runner,
        topk,
        num_steps,
    )
    if not can_run_cuda_graph and not forward_batch.forward_mode.is_idle():
        draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    return PlannedDraftBatch(forward_batch, bool(can_run_cuda_graph), kv_loc_plan)


# idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend + eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
# expect: SG106
def run_marked_draft_extend(draft_runner, draft_extend_backend, forward_batch):
    """Eager draft extend: plan on the plan stream's batch, then run it."""
    if forward_batch.forward_mode.is_idle():
        return draft_runner.forward(forward_batch).logits_output
    forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
    draft_extend_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    output = draft_runner.forward(forward_batch)
    return output.logits_output


# idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend + eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
# expect: clean
def run_replannable_draft_extend(draft_runner, draft_extend_backend, forward_batch):
    """Eager draft extend on the plan stream's batch (replannable mark)."""
    if forward_batch.forward_mode.is_idle():
        return draft_runner.forward(forward_batch).logits_output
    forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
    draft_extend_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    output = draft_runner.forward(forward_batch)
    return output.logits_output


# idiom: sglang/srt/speculative/eagle_utils.py eagle_prepare_for_verify + eagle_worker_common.py run_eagle_verify
# expect: clean
def run_verify_with_preplan(target_worker, batch: ScheduleBatch, verify_input):
    """Build the verify batch, pre-plan the eager path, run the target."""
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.TARGET_VERIFY
    )
    batch.spec_info = verify_input
    verify_forward_batch = ForwardBatch.init_new(
        batch,
        target_worker.model_runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
    )
    graph_runner = target_worker.model_runner.decode_cuda_graph_runner
    can_run_cuda_graph = bool(
        graph_runner and graph_runner.can_run_graph(verify_forward_batch)
    )
    if can_run_cuda_graph:
        graph_runner.load_batch(verify_forward_batch)
        verify_forward_batch.mark_forward_metadata_ready()
    elif not batch.forward_mode.is_idle():
        target_worker.model_runner.attn_backend.init_forward_metadata(
            verify_forward_batch
        )
        verify_forward_batch.mark_forward_metadata_ready()
    return target_worker.forward_batch_generation(
        batch=None,
        forward_batch=verify_forward_batch,
        is_verify=True,
    )


# idiom: sglang/srt/speculative/eagle_utils.py eagle_prepare_for_verify (reused for the draft-extend batch)
# expect: SG106
def run_draft_extend_with_preplan(draft_worker, batch: ScheduleBatch, extend_input):
    """Same preparation as the verify batch, reused for the draft extend."""
    batch.forward_mode = (
        ForwardMode.IDLE
        if batch.forward_mode.is_idle()
        else ForwardMode.DRAFT_EXTEND_V2
    )
    batch.spec_info = extend_input
    extend_forward_batch = ForwardBatch.init_new(
        batch,
        draft_worker.draft_runner,
        capture_hidden_mode=CaptureHiddenMode.LAST,
    )
    graph_runner = draft_worker.cuda_graph_runner_for_draft_extend
    can_run_cuda_graph = bool(
        graph_runner and graph_runner.can_run_graph(extend_forward_batch)
    )
    if can_run_cuda_graph:
        return graph_runner.execute(extend_forward_batch, None)
    if not batch.forward_mode.is_idle():
        draft_worker.draft_runner.attn_backend.init_forward_metadata(
            extend_forward_batch
        )
        extend_forward_batch.mark_forward_metadata_ready()
    return draft_worker.draft_runner.forward(extend_forward_batch).logits_output


# idiom: sglang/srt/model_executor/model_runner.py ModelRunner._prepare_eager_forward_batch + eagle_worker_common.py prepare_for_draft_extend
# expect: clean
def run_with_padded_plan(model_runner, attn_backend, forward_batch: ForwardBatch):
    """MLP-sync pad, pre-plan, run."""
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(model_runner)
    if not forward_batch.forward_mode.is_idle():
        attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return model_runner.forward(forward_batch)


# idiom: sglang/srt/model_executor/model_runner.py ModelRunner._prepare_eager_forward_batch + eagle_worker_common.py prepare_for_draft_extend
# expect: SG106
def run_with_late_pad(model_runner, attn_backend, forward_batch: ForwardBatch):
    """Pre-plan, MLP-sync pad, run."""
    if not forward_batch.forward_mode.is_idle():
        attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(model_runner)
    return model_runner.forward(forward_batch)
