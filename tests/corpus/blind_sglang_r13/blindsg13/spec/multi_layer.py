"""Multi-layer EAGLE (MTP) draft extend without a draft-extend CUDA graph."""

from __future__ import annotations

import logging
from typing import List

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.utils.common import fast_topk

logger = logging.getLogger(__name__)


class EagerMultiLayerEagleDraftWorker(MultiLayerEagleDraftWorker):
    """Per-step runners, each with its own attention backend."""

    def _bind_step_pools(self, forward_batch: ForwardBatch, step: int) -> ModelRunner:
        runner = self.draft_runner_list[step]
        forward_batch.req_to_token_pool = runner.req_to_token_pool
        forward_batch.token_to_kv_pool = runner.token_to_kv_pool
        return runner

    def _next_topk(self, logits: torch.Tensor):
        probs = torch.softmax(logits, dim=-1)
        return fast_topk(probs, self.topk, dim=-1)

    # expect: SG106
    def draft_extend_steps_marked(self, forward_batch: ForwardBatch):
        topk_list: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            runner = self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            out = runner.forward(forward_batch)
            _, topk_index = self._next_topk(out.logits_output.next_token_logits)
            topk_list.append(topk_index)
        return topk_list

    # expect: clean
    def draft_extend_steps_unmarked(self, forward_batch: ForwardBatch):
        """Each step plans pre-pad for its own backend but leaves the batch
        unmarked, so every step's forward re-inits post-pad."""
        topk_list: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            runner = self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
            out = runner.forward(forward_batch)
            _, topk_index = self._next_topk(out.logits_output.next_token_logits)
            topk_list.append(topk_index)
        return topk_list

    # expect: SG106
    def draft_extend_first_runner_planned(self, forward_batch: ForwardBatch):
        first: ModelRunner = self.draft_runner_list[0]
        if not forward_batch.forward_mode.is_idle():
            first.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        hidden = []
        for step, runner in enumerate(self.draft_runner_list):
            if step >= self.speculative_num_steps:
                break
            self._bind_step_pools(forward_batch, step)
            out = runner.forward(forward_batch)
            hidden.append(out.logits_output.hidden_states)
        return hidden

    # expect: clean
    def draft_extend_steps_prepadded(self, forward_batch: ForwardBatch):
        """Pad once for DP attention, then plan + mark each step's backend."""
        first: ModelRunner = self.draft_runner_list[0]
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(first)
        topk_list: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            runner = self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            out = runner.forward(forward_batch)
            _, topk_index = self._next_topk(out.logits_output.next_token_logits)
            topk_list.append(topk_index)
        return topk_list
