"""Module-level batch builders used by the scheduler glue."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional, Tuple

import torch

from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

from blindsg35.serving._plan import build_draft_extend_batch

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.tp_worker import TpModelWorker
    from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.eagle_info import EagleVerifyInput

logger = logging.getLogger(__name__)


# idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
# expect: SG106
def build_planned_draft_extend_batch(
    draft_extend_input: EagleDraftExtendInput,
    batch: "ScheduleBatch",
    predict: torch.Tensor,
    num_draft_tokens: int,
    draft_model_runner: "ModelRunner",
    cuda_graph_runner=None,
    *,
    kv_loc_plan: Optional["KVLocPlan"] = None,
) -> Tuple[ForwardBatch, bool]:
    forward_batch = build_draft_extend_batch(
        draft_extend_input,
        batch,
        predict,
        num_draft_tokens,
        draft_model_runner,
        kv_loc_plan=kv_loc_plan,
    )
    can_run_graph = bool(
        cuda_graph_runner and cuda_graph_runner.can_run_graph(forward_batch)
    )
    if not batch.forward_mode.is_idle() and not can_run_graph:
        draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        # Planned pre-pad and kept: DSA's indexer cannot rebuild its schedule
        # on a DP-padded batch, so do not opt into the post-pad re-plan.
        forward_batch.mark_forward_metadata_ready()
    return forward_batch, can_run_graph


def run_built_draft_extend(
    draft_model_runner: "ModelRunner",
    forward_batch: ForwardBatch,
    can_run_graph: bool,
    cuda_graph_runner=None,
    select_index: Optional[torch.Tensor] = None,
):
    if can_run_graph:
        return cuda_graph_runner.execute(forward_batch, select_index)
    return draft_model_runner.forward(forward_batch).logits_output


# idiom: sglang/srt/speculative/eagle_utils.py eagle_prepare_for_verify
# expect: clean
def build_verify_batch_for_graph(
    verify_input: "EagleVerifyInput",
    batch: "ScheduleBatch",
    target_worker: "TpModelWorker",
) -> Tuple[ForwardBatch, bool]:
    batch.spec_info = verify_input
    batch.input_ids = verify_input.draft_token
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.TARGET_VERIFY
    )
    verify_forward_batch = ForwardBatch.init_new(
        batch,
        target_worker.model_runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_hidden_states_before_norm=False,
        kv_loc_plan=verify_input.kv_loc_plan,
    )
    graph_runner = target_worker.model_runner.decode_cuda_graph_runner
    can_run_cuda_graph = bool(
        graph_runner and graph_runner.can_run_graph(verify_forward_batch)
    )
    if can_run_cuda_graph:
        # The graph runner pads into its own static buffers; load_batch is the
        # plan for that padded shape.
        graph_runner.load_batch(verify_forward_batch)
        verify_forward_batch.mark_forward_metadata_ready()
    # Non-graph: left unmarked, planned by the forward after padding.
    return verify_forward_batch, can_run_cuda_graph
