"""Scheduler-side pre-planning for the fork's overlap loop.

While the previous step samples, the scheduler builds the next ForwardBatch
and plans its attention metadata on a side stream.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.spec_utils import get_plan_stream

logger = logging.getLogger(__name__)


class SchedulerPrePlanMixin:
    """Mixed into Scheduler; relies on self.tp_worker / self.dp_attn_adapter."""

    def _init_preplan(self):
        self.preplan_stream, self.preplan_stream_ctx = get_plan_stream(
            self.tp_worker.model_runner.device
        )

    # expect: SG106
    def run_batch_preplanned(self, batch: ScheduleBatch) -> GenerationBatchResult:
        batch = self.dp_attn_adapter.maybe_prepare_mlp_sync_batch(batch)
        model_runner = self.tp_worker.model_runner
        forward_batch = ForwardBatch.init_new(
            batch, model_runner, return_hidden_states_before_norm=False
        )
        with self.preplan_stream_ctx:
            if not forward_batch.forward_mode.is_idle():
                model_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        torch.cuda.current_stream().wait_stream(self.preplan_stream)
        return self.tp_worker.forward_batch_generation(None, forward_batch=forward_batch)

    # expect: clean
    def run_batch_graph_preplanned(self, batch: ScheduleBatch) -> GenerationBatchResult:
        batch = self.dp_attn_adapter.maybe_prepare_mlp_sync_batch(batch)
        model_runner = self.tp_worker.model_runner
        forward_batch = ForwardBatch.init_new(
            batch, model_runner, return_hidden_states_before_norm=False
        )
        graph_runner = model_runner.decode_cuda_graph_runner
        with self.preplan_stream_ctx:
            if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
                # Graph replay: load_batch pads to the captured bs and plans
                # for it; the eager path is left to plan post-pad.
                graph_runner.load_batch(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        torch.cuda.current_stream().wait_stream(self.preplan_stream)
        return self.tp_worker.forward_batch_generation(None, forward_batch=forward_batch)


# expect: SG106
def forward_planned_copy(
    model_runner: ModelRunner, forward_batch: ForwardBatch
):
    """Plan once, then run a shallow copy (the original stays untouched for
    the logprob pass)."""
    model_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    run_batch = dataclasses.replace(forward_batch, return_logprob=False)
    return model_runner.forward(run_batch)


# expect: clean
def forward_planned_copy_unmarked(
    model_runner: ModelRunner, forward_batch: ForwardBatch
):
    model_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    # The copy the runner pads must be planned by the runner itself.
    run_batch = dataclasses.replace(
        forward_batch, return_logprob=False, forward_metadata_ready=False
    )
    return model_runner.forward(run_batch)


# expect: SG106
def forward_with_optional_plan_stream(
    model_runner: ModelRunner,
    forward_batch: ForwardBatch,
    plan_stream: Optional[torch.cuda.Stream] = None,
):
    plan_kwargs = {"forward_batch": forward_batch}
    ctx = (
        torch.cuda.stream(plan_stream) if plan_stream else contextlib.nullcontext()
    )
    with ctx:
        model_runner.attn_backend.init_forward_metadata(**plan_kwargs)
    forward_batch.apply_deprecated_skip_attn_backend_init(True)
    return model_runner.forward(forward_batch)


# expect: clean
def forward_with_optional_plan_stream_dp_aware(
    model_runner: ModelRunner,
    forward_batch: ForwardBatch,
    plan_stream: Optional[torch.cuda.Stream] = None,
):
    plan_kwargs = {"forward_batch": forward_batch}
    ctx = (
        torch.cuda.stream(plan_stream) if plan_stream else contextlib.nullcontext()
    )
    with ctx:
        model_runner.attn_backend.init_forward_metadata(**plan_kwargs)
    # Skip the runner's plan only when it will not pad (no MLP sync).
    forward_batch.apply_deprecated_skip_attn_backend_init(
        forward_batch.global_num_tokens_cpu is None
    )
    return model_runner.forward(forward_batch)
