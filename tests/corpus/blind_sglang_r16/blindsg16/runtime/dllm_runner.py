# Copyright 2023-2026 SGLang Team
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# ==============================================================================
"""Block-diffusion (dLLM) denoise loops that reuse one attention plan per block.

The canvas of a block keeps its shape for every denoise step, so the loops
below plan attention once and run ``max_steps`` forwards against it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, List

import torch

from sglang.srt.dllm.algorithm.base import DllmAlgorithm, DllmRunOutput
from sglang.srt.dllm.config import DllmConfig
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.utils.common import require_mlp_sync

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner


def _collect_block_outputs(
    forward_batch: ForwardBatch, start_list: List[int], block_size: int
) -> List[torch.Tensor]:
    next_token_ids = forward_batch.input_ids.view(forward_batch.batch_size, block_size)
    return [next_token_ids[i, start_list[i] :] for i in range(len(start_list))]


class PlannedCanvasDiffusion(DllmAlgorithm):
    """Low-confidence remasking with a single up-front attention plan."""

    def __init__(self, config: DllmConfig):
        super().__init__(config)
        self.threshold = 0.95
        self._canvas_ready = False

    def step(
        self,
        forward_batch: ForwardBatch,
        full_logits: torch.Tensor,
        states: List[Any],
    ) -> List[bool]:
        batch_size = forward_batch.batch_size
        input_ids = forward_batch.input_ids.view(batch_size, self.block_size)
        logits = full_logits.view(batch_size, self.block_size, -1)
        probs = torch.softmax(logits.float(), dim=-1)
        conf, pred = probs.max(dim=-1)
        masked = input_ids == self.mask_id
        accept = masked & (conf >= self.threshold)
        input_ids[accept] = pred[accept]
        return (~(input_ids == self.mask_id).any(dim=1)).tolist()

    def prepare_canvas(
        self, model_runner: ModelRunner, forward_batch: ForwardBatch
    ) -> None:
        model_runner.attn_backend.init_forward_metadata(forward_batch)
        self._canvas_ready = True

    # expect: SG106
    def _run_sync(
        self, model_runner: ModelRunner, forward_batch: ForwardBatch
    ) -> DllmRunOutput:
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

        next_ids = _collect_block_outputs(forward_batch, start_list, self.block_size)
        return out.logits_output, next_ids, None, None, out.can_run_graph

    # expect: SG106
    def run_canvas(
        self, model_runner: ModelRunner, forward_batch: ForwardBatch
    ) -> DllmRunOutput:
        start_list = self._block_start_list(forward_batch)
        states = self.init_step_state(forward_batch)
        self.prepare_inputs(model_runner, forward_batch, states)
        self.prepare_canvas(model_runner, forward_batch)
        if self._canvas_ready:
            forward_batch.mark_forward_metadata_ready()

        out = None
        for _ in range(self.max_steps(self.block_size)):
            out = model_runner.forward(forward_batch, pp_proxy_tensors=None)
            done = self.step(forward_batch, out.logits_output.full_logits, states)
            if all(done):
                break
            self.prepare_inputs(model_runner, forward_batch, states)

        next_ids = _collect_block_outputs(forward_batch, start_list, self.block_size)
        return out.logits_output, next_ids, None, None, out.can_run_graph

    # expect: clean
    def run_canvas_steps(
        self, model_runner: ModelRunner, forward_batch: ForwardBatch
    ) -> DllmRunOutput:
        start_list = self._block_start_list(forward_batch)
        states = self.init_step_state(forward_batch)
        self.prepare_inputs(model_runner, forward_batch, states)
        self.prepare_canvas(model_runner, forward_batch)
        if self._canvas_ready and not require_mlp_sync():
            forward_batch.mark_forward_metadata_ready()

        out = None
        for _ in range(self.max_steps(self.block_size)):
            out = model_runner.forward(forward_batch, pp_proxy_tensors=None)
            done = self.step(forward_batch, out.logits_output.full_logits, states)
            if all(done):
                break
            self.prepare_inputs(model_runner, forward_batch, states)

        next_ids = _collect_block_outputs(forward_batch, start_list, self.block_size)
        return out.logits_output, next_ids, None, None, out.can_run_graph

    # expect: SG106
    def denoise_block(
        self, model_runner: ModelRunner, forward_batch: ForwardBatch
    ) -> torch.Tensor:
        states = self.init_step_state(forward_batch)
        full_logits = None
        for step_idx in range(self.max_steps(self.block_size)):
            self.prepare_inputs(model_runner, forward_batch, states)
            if step_idx == 0:
                model_runner.attn_backend.init_forward_metadata(forward_batch)
            out = model_runner.forward(
                forward_batch, skip_attn_backend_init=True, pp_proxy_tensors=None
            )
            full_logits = out.logits_output.full_logits
            if all(self.step(forward_batch, full_logits, states)):
                break
        return full_logits

    # expect: clean
    def denoise_block_reuse(
        self, model_runner: ModelRunner, forward_batch: ForwardBatch
    ) -> torch.Tensor:
        states = self.init_step_state(forward_batch)
        reuse_plan = not require_mlp_sync()
        full_logits = None
        for step_idx in range(self.max_steps(self.block_size)):
            self.prepare_inputs(model_runner, forward_batch, states)
            if step_idx == 0 and reuse_plan:
                model_runner.attn_backend.init_forward_metadata(forward_batch)
            out = model_runner.forward(
                forward_batch,
                skip_attn_backend_init=reuse_plan,
                pp_proxy_tensors=None,
            )
            full_logits = out.logits_output.full_logits
            if all(self.step(forward_batch, full_logits, states)):
                break
        return full_logits


class ForwardPlannedCanvasDiffusion(PlannedCanvasDiffusion):
    """Remasking loop that reuses the first forward's metadata across steps."""

    # expect: clean
    def _run_sync(
        self, model_runner: ModelRunner, forward_batch: ForwardBatch
    ) -> DllmRunOutput:
        start_list = self._block_start_list(forward_batch)
        states = self.init_step_state(forward_batch)
        self.prepare_inputs(model_runner, forward_batch, states)

        if not forward_batch.forward_mode.is_idle() and not require_mlp_sync():
            model_runner.attn_backend.init_forward_metadata(forward_batch)
        out = model_runner.forward(forward_batch, pp_proxy_tensors=None)
        if all(start == self.block_size for start in start_list):
            return out.logits_output, [], None, None, out.can_run_graph

        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        for _ in range(self.max_steps(self.block_size)):
            done = self.step(forward_batch, out.logits_output.full_logits, states)
            if all(done):
                break
            self.prepare_inputs(model_runner, forward_batch, states)
            out = model_runner.forward(forward_batch, pp_proxy_tensors=None)

        next_ids = _collect_block_outputs(forward_batch, start_list, self.block_size)
        return out.logits_output, next_ids, None, None, out.can_run_graph
