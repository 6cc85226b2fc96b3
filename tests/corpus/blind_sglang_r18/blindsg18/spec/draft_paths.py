"""Free-function draft-extend paths shared by the fork's EAGLE / standalone
workers. Each takes the draft ``ModelRunner`` (or a worker) explicitly so the
scheduler-side overlap code can call them without a worker instance."""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker

from blindsg18.common.dp_padding import (
    PrePlanMixin,
    dp_attention_active,
    pad_batch_for_dp,
    plan_and_mark,
)

logger = logging.getLogger(__name__)

# Kept for A/B runs against the old eager pre-plan; never enabled in prod.
_LEGACY_EAGER_PREPLAN = False


# expect: SG106
def run_draft_extend_eager(
    draft_runner: ModelRunner,
    forward_batch: ForwardBatch,
    *,
    overlap_plan: bool = True,
):
    """Eager draft extend. With ``overlap_plan`` the attention plan is issued
    before the forward so it overlaps the host-side sampling of the target."""
    if overlap_plan and not forward_batch.forward_mode.is_idle():
        plan_and_mark(draft_runner.attn_backend, forward_batch)
    return draft_runner.forward(forward_batch).logits_output


# expect: SG106
def run_draft_extend_dp_aware(draft_runner: ModelRunner, forward_batch: ForwardBatch):
    dp_enabled = get_parallel().attn_dp_enabled
    if not forward_batch.forward_mode.is_idle():
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        # The DSA indexer can't rebuild on a DP-padded batch (#27091), so only
        # allow the post-pad re-plan on single-DP deployments.
        forward_batch.mark_forward_metadata_ready(replan_equivalent=not dp_enabled)
    return draft_runner.forward(forward_batch).logits_output


# expect: clean
def run_draft_extend_replan_under_dp(
    draft_runner: ModelRunner, forward_batch: ForwardBatch
):
    if not forward_batch.forward_mode.is_idle():
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        # Under DP attention the runner pads this batch; let it re-plan on the
        # padded shapes (same backend object, so the re-plan is equivalent).
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=dp_attention_active()
        )
    return draft_runner.forward(forward_batch).logits_output


# expect: SG106
def run_draft_extend_remarked(draft_runner: ModelRunner, forward_batch: ForwardBatch):
    """Plan early, pad, then record the plan against the padded shapes so the
    runner's staleness check doesn't trip a second plan."""
    if forward_batch.forward_mode.is_idle():
        return draft_runner.forward(forward_batch).logits_output
    draft_runner.attn_backend.init_forward_metadata(forward_batch)
    pad_batch_for_dp(forward_batch, draft_runner)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    return draft_runner.forward(forward_batch).logits_output


# expect: clean
def run_draft_extend_replanned(draft_runner: ModelRunner, forward_batch: ForwardBatch):
    """Plan early for overlap; if DP padding then changes the batch, plan it
    again on the final shapes before the forward."""
    if forward_batch.forward_mode.is_idle():
        return draft_runner.forward(forward_batch).logits_output
    backend = draft_runner.attn_backend
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    planned_bs = forward_batch.batch_size
    planned_tokens = forward_batch.input_ids.shape[0]
    if pad_batch_for_dp(forward_batch, draft_runner) and (
        forward_batch.batch_size != planned_bs
        or forward_batch.input_ids.shape[0] != planned_tokens
    ):
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return draft_runner.forward(forward_batch).logits_output


# expect: SG106
def run_draft_extend_graph_or_eager(
    worker: Any, forward_batch: ForwardBatch, select_index: torch.Tensor
):
    """Plan first, then pick graph replay or the eager forward."""
    if not forward_batch.forward_mode.is_idle():
        worker.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    graph_runner = worker.cuda_graph_runner_for_draft_extend
    if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
        return graph_runner.execute(forward_batch, select_index), True

    logits_output = worker.draft_runner.forward(forward_batch).logits_output
    logits_output.next_token_logits = logits_output.next_token_logits[select_index]
    return logits_output, False


# expect: clean
def run_draft_extend_graph_preplanned(
    worker: Any, forward_batch: ForwardBatch, select_index: torch.Tensor
):
    """Only the graph path is pre-planned (load_batch pads into the captured
    buffers before planning); the eager path plans inside the forward."""
    graph_runner = worker.cuda_graph_runner_for_draft_extend
    if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
        graph_runner.load_batch(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return graph_runner.execute(forward_batch, select_index), True

    logits_output = worker.draft_runner.forward(forward_batch).logits_output
    logits_output.next_token_logits = logits_output.next_token_logits[select_index]
    return logits_output, False


# expect: SG106
def run_draft_extend_on_worker(tp_worker: Any, forward_batch: ForwardBatch):
    """Run the draft extend through the draft TpModelWorker (keeps the
    worker's hooks: hicache consumer, logprob capture)."""
    if not forward_batch.forward_mode.is_idle():
        tp_worker.model_runner.attn_backend.init_forward_metadata(forward_batch)
    result = tp_worker.forward_batch_generation(
        None,
        forward_batch=forward_batch,
        is_verify=True,
        skip_attn_backend_init=not forward_batch.forward_mode.is_idle(),
    )
    return result.logits_output


# expect: clean
def run_draft_extend_unpadded_only(
    draft_runner: ModelRunner, forward_batch: ForwardBatch
):
    """Pre-plan only batches the runner will not pad (no MLP-sync counts)."""
    if (
        forward_batch.global_num_tokens_cpu is None
        and not forward_batch.forward_mode.is_idle()
    ):
        plan_and_mark(draft_runner.attn_backend, forward_batch)
    return draft_runner.forward(forward_batch).logits_output


# expect: clean
def run_draft_extend_dp_early_exit(
    draft_runner: ModelRunner, forward_batch: ForwardBatch
):
    if dp_attention_active() or forward_batch.global_num_tokens_cpu is not None:
        # Padded by the runner: let it plan post-pad.
        return draft_runner.forward(forward_batch).logits_output
    if not forward_batch.forward_mode.is_idle():
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return draft_runner.forward(forward_batch).logits_output


# expect: clean
def run_draft_extend_legacy_switch(
    draft_runner: ModelRunner, forward_batch: ForwardBatch
):
    if _LEGACY_EAGER_PREPLAN and not forward_batch.forward_mode.is_idle():
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return draft_runner.forward(forward_batch).logits_output


class DraftRunnerHandle:
    """Wraps a draft runner with the fork's NaN/inf probes."""

    def __init__(self, model_runner: ModelRunner):
        self.model_runner = model_runner

    def run(self, forward_batch: ForwardBatch):
        out = self.model_runner.forward(forward_batch)
        logits = out.logits_output.next_token_logits
        if not torch.isfinite(logits).all():
            logger.warning("non-finite draft logits (bs=%d)", forward_batch.batch_size)
        return out.logits_output


# expect: SG106
def run_with_backend_table(
    handle: DraftRunnerHandle,
    backends: Dict[str, Any],
    forward_batch: ForwardBatch,
    mode: str = "draft_extend",
):
    backend = backends[mode]
    if backend is not None and not forward_batch.forward_mode.is_idle():
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return handle.run(forward_batch)


class PlanAheadStandaloneWorker(PrePlanMixin, StandaloneDraftWorker):
    """Standalone (small-LLM) draft worker that plans its draft extend early."""

    # expect: SG106
    def extend_after_verify(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        if not forward_batch.forward_mode.is_idle():
            self._preplan(forward_batch)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        return logits_output

    # expect: clean
    def extend_after_verify_safe(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ):
        if not forward_batch.forward_mode.is_idle():
            self._preplan_if_safe(forward_batch)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        return logits_output
