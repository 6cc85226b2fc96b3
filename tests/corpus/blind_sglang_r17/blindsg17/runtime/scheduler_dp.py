"""Scheduler-side pre-planning for DP-attention decode, and a dLLM loop that
reuses the first forward's plan across denoise steps."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

from sglang.srt.dllm.algorithm.low_confidence import LowConfidence
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.utils import is_npu

if TYPE_CHECKING:
    from sglang.srt.managers.scheduler import GenerationBatchResult

_is_npu = is_npu()

logger = logging.getLogger(__name__)


class SchedulerDecodePrePlanMixin:
    """Mixed into ``Scheduler``: overlaps decode planning with the previous
    step's sampling on the scheduler thread."""

    def _decode_forward_batch(self, batch: ScheduleBatch) -> ForwardBatch:
        return ForwardBatch.init_new(
            batch,
            self.tp_worker.model_runner,
            return_hidden_states_before_norm=False,
        )

    def _decode_can_run_graph(self, forward_batch: ForwardBatch) -> bool:
        runner = self.tp_worker.model_runner.decode_cuda_graph_runner
        return bool(runner is not None and runner.can_run_graph(forward_batch))

    # expect: SG106
    def run_decode_batch_preplanned(
        self, batch: ScheduleBatch
    ) -> "GenerationBatchResult":
        batch = self.dp_attn_adapter.maybe_prepare_mlp_sync_batch(batch)
        forward_batch = self._decode_forward_batch(batch)
        model_runner = self.tp_worker.model_runner
        if (
            forward_batch.forward_mode.is_decode()
            and not self._decode_can_run_graph(forward_batch)
        ):
            model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.tp_worker.forward_batch_generation(
            batch=None, forward_batch=forward_batch
        )

    # expect: clean
    def run_decode_batch_preplanned_v2(
        self, batch: ScheduleBatch
    ) -> "GenerationBatchResult":
        batch = self.dp_attn_adapter.maybe_prepare_mlp_sync_batch(batch)
        forward_batch = self._decode_forward_batch(batch)
        model_runner = self.tp_worker.model_runner
        if (
            forward_batch.forward_mode.is_decode()
            and not self._decode_can_run_graph(forward_batch)
        ):
            model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.tp_worker.forward_batch_generation(
            batch=None, forward_batch=forward_batch
        )

    # expect: SG106
    def run_decode_batch_on_plan_stream(
        self, batch: ScheduleBatch
    ) -> "GenerationBatchResult":
        model_runner: ModelRunner = self.tp_worker.model_runner
        forward_batch = self._decode_forward_batch(batch)
        eager = forward_batch.forward_mode.is_decode() and not (
            self._decode_can_run_graph(forward_batch)
        )
        plan_stream = getattr(self, "decode_plan_stream", None)
        if eager:
            if plan_stream is not None:
                with torch.cuda.stream(plan_stream):
                    model_runner.attn_backend.init_forward_metadata(forward_batch)
                torch.cuda.current_stream().wait_stream(plan_stream)
            else:
                model_runner.attn_backend.init_forward_metadata(forward_batch)
        skip = eager
        return self.tp_worker.forward_batch_generation(
            batch=None,
            forward_batch=forward_batch,
            skip_attn_backend_init=skip,
        )

    # expect: clean
    def run_decode_batch_overlapped(
        self, batch: ScheduleBatch
    ) -> "GenerationBatchResult":
        model_runner: ModelRunner = self.tp_worker.model_runner
        forward_batch = self._decode_forward_batch(batch)
        eager = forward_batch.forward_mode.is_decode() and not (
            self._decode_can_run_graph(forward_batch)
        )
        plan_stream = getattr(self, "decode_plan_stream", None)
        preplan = eager and forward_batch.global_num_tokens_cpu is None
        if preplan:
            if plan_stream is not None:
                with torch.cuda.stream(plan_stream):
                    model_runner.attn_backend.init_forward_metadata(forward_batch)
                torch.cuda.current_stream().wait_stream(plan_stream)
            else:
                model_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.tp_worker.forward_batch_generation(
            batch=None,
            forward_batch=forward_batch,
            skip_attn_backend_init=preplan,
        )


class CanvasPlanLowConfidence(LowConfidence):
    """Low-confidence dLLM decoding that plans the fixed canvas once."""

    reuse_forward_metadata = True

    # expect: SG106
    def _run_sync(self, model_runner: ModelRunner, forward_batch: ForwardBatch):
        batch_size = forward_batch.batch_size
        start_list = self._block_start_list(forward_batch)
        states = self.init_step_state(forward_batch)
        self.prepare_inputs(model_runner, forward_batch, states)

        model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        out = model_runner.forward(forward_batch, pp_proxy_tensors=None)
        if all(start == self.block_size for start in start_list):
            return out.logits_output, [], None, None, out.can_run_graph

        for _ in range(self.max_steps(self.block_size)):
            done = self.step(forward_batch, out.logits_output.full_logits, states)
            if all(done):
                break
            self.prepare_inputs(model_runner, forward_batch, states)
            out = model_runner.forward(forward_batch, pp_proxy_tensors=None)

        next_token_ids = forward_batch.input_ids.view(batch_size, self.block_size)
        next_token_ids_list = [
            next_token_ids[i, start_list[i] :] for i in range(batch_size)
        ]
        return out.logits_output, next_token_ids_list, None, None, out.can_run_graph


class CanvasReuseLowConfidence(LowConfidence):
    reuse_forward_metadata = True

    # expect: clean
    def _run_sync(self, model_runner: ModelRunner, forward_batch: ForwardBatch):
        batch_size = forward_batch.batch_size
        start_list = self._block_start_list(forward_batch)
        states = self.init_step_state(forward_batch)
        self.prepare_inputs(model_runner, forward_batch, states)

        out = model_runner.forward(forward_batch, pp_proxy_tensors=None)
        if all(start == self.block_size for start in start_list):
            return out.logits_output, [], None, None, out.can_run_graph

        if _is_npu or (self.reuse_forward_metadata and out.can_run_graph):
            forward_batch.mark_forward_metadata_ready(replan_equivalent=not _is_npu)
        for _ in range(self.max_steps(self.block_size)):
            done = self.step(forward_batch, out.logits_output.full_logits, states)
            if all(done):
                break
            self.prepare_inputs(model_runner, forward_batch, states)
            out = model_runner.forward(forward_batch, pp_proxy_tensors=None)

        next_token_ids = forward_batch.input_ids.view(batch_size, self.block_size)
        next_token_ids_list = [
            next_token_ids[i, start_list[i] :] for i in range(batch_size)
        ]
        return out.logits_output, next_token_ids_list, None, None, out.can_run_graph


class StepwiseLowConfidence(LowConfidence):
    reuse_forward_metadata = True

    def _denoise_loop(self, model_runner, forward_batch, states, replan_equivalent):
        out = None
        for step_idx in range(self.max_steps(self.block_size)):
            self.prepare_inputs(model_runner, forward_batch, states)
            if step_idx > 0:
                model_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(
                    replan_equivalent=replan_equivalent
                )
            out = model_runner.forward(forward_batch, pp_proxy_tensors=None)
            done = self.step(forward_batch, out.logits_output.full_logits, states)
            if all(done):
                break
        return out

    # expect: SG106
    def run_denoise(self, model_runner: ModelRunner, forward_batch: ForwardBatch):
        batch_size = forward_batch.batch_size
        start_list = self._block_start_list(forward_batch)
        states = self.init_step_state(forward_batch)
        out = None
        for step_idx in range(self.max_steps(self.block_size)):
            self.prepare_inputs(model_runner, forward_batch, states)
            if step_idx > 0:
                model_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            out = model_runner.forward(forward_batch, pp_proxy_tensors=None)
            done = self.step(forward_batch, out.logits_output.full_logits, states)
            if all(done):
                break
        next_token_ids = forward_batch.input_ids.view(batch_size, self.block_size)
        return out, [next_token_ids[i, start_list[i] :] for i in range(batch_size)]

    # expect: clean
    def run_denoise_looped(
        self, model_runner: ModelRunner, forward_batch: ForwardBatch
    ):
        batch_size = forward_batch.batch_size
        start_list = self._block_start_list(forward_batch)
        states = self.init_step_state(forward_batch)
        out = self._denoise_loop(
            model_runner, forward_batch, states, replan_equivalent=True
        )
        next_token_ids = forward_batch.input_ids.view(batch_size, self.block_size)
        return out, [next_token_ids[i, start_list[i] :] for i in range(batch_size)]
