"""Draft-extend helpers ported from the 0.5.x ``EAGLEWorker``.

The fork's MTP deployments still call these on the v2 draft worker
(``worker.draft_runner``); they predate ``mark_forward_metadata_ready`` and
use the ``skip_attn_backend_init`` spelling, which ModelRunner still maps.
"""

from __future__ import annotations

import functools

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils.common import require_mlp_sync


def _draft_extend_graph(worker, forward_batch: ForwardBatch):
    runner = worker.cuda_graph_runner_for_draft_extend
    if runner is not None and runner.can_run_graph(forward_batch):
        return runner
    return None


# expect: SG106
def forward_draft_extend_after_decode_legacy(
    worker, forward_batch: ForwardBatch, select_index: torch.Tensor
):
    graph_runner = _draft_extend_graph(worker, forward_batch)
    if graph_runner is not None:
        return graph_runner.execute(forward_batch, select_index)
    forward_batch.can_run_dp_draft_cuda_graph = False
    if not forward_batch.forward_mode.is_idle():
        worker.draft_runner.attn_backend.init_forward_metadata(forward_batch)
    return worker.draft_runner.forward(
        forward_batch, skip_attn_backend_init=True
    ).logits_output


# expect: clean
def forward_draft_extend_after_decode_dp_aware(
    worker, forward_batch: ForwardBatch, select_index: torch.Tensor
):
    graph_runner = _draft_extend_graph(worker, forward_batch)
    if graph_runner is not None:
        return graph_runner.execute(forward_batch, select_index)
    forward_batch.can_run_dp_draft_cuda_graph = False
    # Same rule as dflash verify: with DP attention the forward pads the batch,
    # so it must plan it itself.
    skip_init = None if get_parallel().attn_dp_enabled else True
    if skip_init and not forward_batch.forward_mode.is_idle():
        worker.draft_runner.attn_backend.init_forward_metadata(forward_batch)
    return worker.draft_runner.forward(
        forward_batch, skip_attn_backend_init=skip_init
    ).logits_output


# expect: SG106
def run_draft_extend_with_kwargs(
    worker, forward_batch: ForwardBatch, *, preplan_metadata: bool = True
):
    forward_kwargs = {}
    if preplan_metadata and not forward_batch.forward_mode.is_idle():
        worker.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_kwargs["skip_attn_backend_init"] = True
    return worker.draft_runner.forward(forward_batch, **forward_kwargs).logits_output


# expect: clean
def run_draft_extend_with_gated_kwargs(worker, forward_batch: ForwardBatch):
    forward_kwargs = {}
    if not require_mlp_sync() and not forward_batch.forward_mode.is_idle():
        worker.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_kwargs["skip_attn_backend_init"] = True
    return worker.draft_runner.forward(forward_batch, **forward_kwargs).logits_output


def make_preplanned_forward(runner):
    """``runner.forward`` for batches whose metadata the caller already built."""
    return functools.partial(runner.forward, skip_attn_backend_init=True)


# expect: SG106
def draft_extend_with_bound_forward(worker, forward_batch: ForwardBatch):
    run_forward = make_preplanned_forward(worker.draft_runner)
    if not forward_batch.forward_mode.is_idle():
        worker.draft_runner.attn_backend.init_forward_metadata(forward_batch)
    return run_forward(forward_batch).logits_output


# expect: clean
def draft_extend_with_plain_partial(worker, forward_batch: ForwardBatch):
    # Old call sites pass the flag explicitly; False keeps the forward's own
    # (post-pad) planning.
    run_forward = functools.partial(
        worker.draft_runner.forward, skip_attn_backend_init=False
    )
    return run_forward(forward_batch).logits_output


def _forward_passthrough(runner, forward_batch: ForwardBatch, **forward_kwargs):
    with torch.cuda.nvtx.range("draft_extend"):
        return runner.forward(forward_batch, **forward_kwargs)


# expect: SG106
def draft_extend_passthrough(worker, forward_batch: ForwardBatch):
    runner = worker.draft_runner
    if not forward_batch.forward_mode.is_idle():
        runner.attn_backend.init_forward_metadata(forward_batch)
    out = _forward_passthrough(runner, forward_batch, skip_attn_backend_init=True)
    return out.logits_output


# expect: SG106
def draft_extend_inline_planner(worker, forward_batch: ForwardBatch):
    backend = worker.draft_runner.attn_backend
    plan = lambda fb: (  # noqa: E731
        backend.init_forward_metadata(fb),
        fb.mark_forward_metadata_ready(),
    )
    if not forward_batch.forward_mode.is_idle():
        plan(forward_batch)
    return worker.draft_runner.forward(forward_batch).logits_output


# expect: clean
def draft_extend_inline_planner_unmarked(worker, forward_batch: ForwardBatch):
    backend = worker.draft_runner.attn_backend
    # Fills the draft kv-indices buffers early on the side stream; the forward
    # re-plans after the DP pad because the batch stays unmarked.
    plan = lambda fb: backend.init_forward_metadata(fb)  # noqa: E731
    if not forward_batch.forward_mode.is_idle():
        with worker.plan_stream_ctx:
            plan(forward_batch)
        if worker.plan_stream is not None:
            torch.get_device_module(worker.device).current_stream().wait_stream(
                worker.plan_stream
            )
    return worker.draft_runner.forward(forward_batch).logits_output
