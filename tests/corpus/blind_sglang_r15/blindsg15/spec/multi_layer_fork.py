"""Multi-layer EAGLE (MTP with one runner per draft layer) eager draft extend.

Each de-tied runner owns its own attention backend, so the eager fallback
walks the runners one step at a time.
"""

from __future__ import annotations

import logging
from typing import List

import torch

from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.utils.common import fast_topk

from blindsg15.spec.planning import (
    DraftStepPlan,
    iter_planned_steps,
    iter_unmarked_steps,
)

logger = logging.getLogger(__name__)


class ForkMultiLayerEagleDraftWorker(MultiLayerEagleDraftWorker):
    @property
    def step_backends(self) -> List[AttentionBackend]:
        return [runner.attn_backend for runner in self.draft_runner_list]

    def _bind_step_pools(self, forward_batch: ForwardBatch, step: int) -> ModelRunner:
        runner = self.draft_runner_list[step]
        forward_batch.req_to_token_pool = runner.req_to_token_pool
        forward_batch.token_to_kv_pool = runner.token_to_kv_pool
        return runner

    def _next_step_inputs(self, forward_batch: ForwardBatch, logits_output) -> None:
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        _, topk_index = fast_topk(probs, self.topk, dim=-1)
        forward_batch.spec_info.hidden_states = logits_output.hidden_states
        forward_batch.input_ids = topk_index.flatten()

    # expect: SG106
    def draft_extend_steps_marked(self, forward_batch: ForwardBatch):
        outputs = []
        for step in range(self.speculative_num_steps):
            runner = self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            out = runner.forward(forward_batch).logits_output
            self._next_step_inputs(forward_batch, out)
            outputs.append(out)
        return outputs

    # expect: clean
    def draft_extend_steps(self, forward_batch: ForwardBatch):
        outputs = []
        for step in range(self.speculative_num_steps):
            runner = self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                # Pre-plan only warms this runner's wrappers; the batch stays
                # unmarked so the forward re-plans post-pad.
                runner.attn_backend.init_forward_metadata(forward_batch)
            out = runner.forward(forward_batch).logits_output
            self._next_step_inputs(forward_batch, out)
            outputs.append(out)
        return outputs

    # expect: SG106
    def draft_extend_steps_gen(self, forward_batch: ForwardBatch):
        outputs = []
        for step, fb in iter_planned_steps(
            self.step_backends, forward_batch, self.speculative_num_steps
        ):
            runner = self._bind_step_pools(fb, step)
            out = runner.forward(fb).logits_output
            self._next_step_inputs(fb, out)
            outputs.append(out)
        return outputs

    # expect: clean
    def draft_extend_steps_gen_unmarked(self, forward_batch: ForwardBatch):
        outputs = []
        for step, fb in iter_unmarked_steps(self.speculative_num_steps, forward_batch):
            runner = self._bind_step_pools(fb, step)
            out = runner.forward(fb).logits_output
            self._next_step_inputs(fb, out)
            outputs.append(out)
        return outputs

    # expect: SG106
    def draft_extend_steps_closure(self, forward_batch: ForwardBatch):
        def _run(step: int):
            runner = self._bind_step_pools(forward_batch, step)
            return runner.forward(forward_batch).logits_output

        outputs = []
        for step in range(self.speculative_num_steps):
            self.step_backends[step].init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            out = _run(step)
            self._next_step_inputs(forward_batch, out)
            outputs.append(out)
        return outputs

    # expect: clean
    def draft_extend_steps_closure_replan(self, forward_batch: ForwardBatch):
        def _run(step: int):
            runner = self._bind_step_pools(forward_batch, step)
            return runner.forward(forward_batch).logits_output

        outputs = []
        for step in range(self.speculative_num_steps):
            # Planned on the very backend runner[step] plans with in forward,
            # so the post-pad re-plan is equivalent.
            self.step_backends[step].init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            out = _run(step)
            self._next_step_inputs(forward_batch, out)
            outputs.append(out)
        return outputs

    # expect: SG106
    def draft_extend_first_step_planned(self, forward_batch: ForwardBatch):
        # Only runner[0]'s backend is pre-planned (all runners share the
        # same page table layout in our deployment).
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner_list[0].attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        outputs = []
        for step in range(self.speculative_num_steps):
            runner = self._bind_step_pools(forward_batch, step)
            out = runner.forward(forward_batch).logits_output
            self._next_step_inputs(forward_batch, out)
            outputs.append(out)
        return outputs

    # expect: SG106
    def draft_extend_step_plans(self, forward_batch: ForwardBatch):
        plans = [
            DraftStepPlan(batch=forward_batch, backend=backend, step=i)
            for i, backend in enumerate(self.step_backends)
        ]
        outputs = []
        for plan in plans:
            fb = plan.commit()
            runner = self._bind_step_pools(fb, plan.step)
            out = runner.forward(fb).logits_output
            self._next_step_inputs(fb, out)
            outputs.append(out)
        return outputs

    # expect: clean
    def draft_extend_step_plans_replan(self, forward_batch: ForwardBatch):
        plans = [
            DraftStepPlan(
                batch=forward_batch, backend=backend, step=i, replan_equivalent=True
            )
            for i, backend in enumerate(self.step_backends)
        ]
        outputs = []
        for plan in plans:
            fb = plan.commit()
            runner = self._bind_step_pools(fb, plan.step)
            out = runner.forward(fb).logits_output
            self._next_step_inputs(fb, out)
            outputs.append(out)
        return outputs
