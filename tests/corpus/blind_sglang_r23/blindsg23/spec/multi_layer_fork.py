"""Eager draft-extend loop of the fork's multi-layer EAGLE (one MTP layer per
step, each with its own runner and attention backend)."""

from __future__ import annotations

from typing import List

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.utils.common import fast_topk


class _MultiLayerStepsBase(MultiLayerEagleDraftWorker):
    def _bind_step_pools(self, forward_batch: ForwardBatch, step: int) -> None:
        runner = self.draft_runner_list[step]
        forward_batch.req_to_token_pool = runner.req_to_token_pool
        forward_batch.token_to_kv_pool = runner.token_to_kv_pool

    def _rotate(self, forward_batch: ForwardBatch, topk_index: torch.Tensor, select_index):
        # Chain-style: the next MTP layer consumes this layer's pick.
        forward_batch.input_ids[select_index] = topk_index.flatten()


class MarkedMultiLayerExtend(_MultiLayerStepsBase):
    # idiom: speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode (eager step loop)
    # expect: SG106
    def run_steps(self, forward_batch: ForwardBatch, select_index: torch.Tensor) -> List[torch.Tensor]:
        picks = []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            runner = self.draft_runner_list[step]
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                # Each runner's plan is its own; skip the forward-path plan.
                forward_batch.mark_forward_metadata_ready()
            output = runner.forward(forward_batch)
            logits = output.logits_output.next_token_logits[select_index]
            _, topk_index = fast_topk(torch.softmax(logits, dim=-1), self.topk, dim=-1)
            picks.append(topk_index)
            self._rotate(forward_batch, topk_index, select_index)
        return picks


class UnmarkedMultiLayerExtend(_MultiLayerStepsBase):
    # idiom: speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode (left unmarked, post-pad init)
    # expect: clean
    def run_steps(self, forward_batch: ForwardBatch, select_index: torch.Tensor) -> List[torch.Tensor]:
        picks = []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            runner = self.draft_runner_list[step]
            if not forward_batch.forward_mode.is_idle():
                # Pre-pad plan only warms this runner's buffers; the batch is
                # left unmarked so each step's forward plans post-pad.
                runner.attn_backend.init_forward_metadata(forward_batch)
            output = runner.forward(forward_batch)
            logits = output.logits_output.next_token_logits[select_index]
            _, topk_index = fast_topk(torch.softmax(logits, dim=-1), self.topk, dim=-1)
            picks.append(topk_index)
            self._rotate(forward_batch, topk_index, select_index)
        return picks
