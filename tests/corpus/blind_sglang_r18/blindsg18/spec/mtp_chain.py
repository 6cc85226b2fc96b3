"""Multi-layer MTP draft-extend chains (one draft runner per MTP layer).

Used when the draft-extend CUDA graph can't run (batch larger than the
captured sizes, or DSA top-k seeding on). Each MTP layer owns a runner and an
attention backend; the chain runs them back to back on one ForwardBatch.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Callable, List, Sequence

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.utils.common import fast_topk

from blindsg18.common.dp_padding import DraftStep, pad_batch_for_dp

logger = logging.getLogger(__name__)


def _rotate(forward_batch: ForwardBatch, topk_index: torch.Tensor, select_index):
    """Shift each request's window left and append the new token."""
    input_ids = forward_batch.input_ids
    input_ids[:-1] = input_ids[1:].clone()
    input_ids[select_index] = topk_index.flatten()


class ChainedMTPDraftWorker(MultiLayerEagleDraftWorker):
    # expect: SG106
    def run_mtp_chain_eager(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        """Eager fallback: plan each MTP layer's backend, then run it."""
        topk_index_list: List[torch.Tensor] = []
        for step, runner in enumerate(self.draft_runner_list):
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                # This runner's backend is the one we just planned; tell the
                # forward not to plan it a second time.
                forward_batch.mark_forward_metadata_ready()
            logits_output = runner.forward(forward_batch).logits_output
            logits = logits_output.next_token_logits[select_index]
            _, topk_index = fast_topk(torch.softmax(logits, dim=-1), 1, dim=-1)
            topk_index_list.append(topk_index)
            if step < self.speculative_num_steps - 1:
                _rotate(forward_batch, topk_index, select_index)
        return topk_index_list

    # expect: clean
    def run_mtp_chain_post_pad(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        """Eager fallback that leaves every step unmarked: each runner's
        forward plans its own backend after the DP padding."""
        topk_index_list: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                # Warm the backend's index buffers; the forward re-plans.
                runner.attn_backend.init_forward_metadata(forward_batch)
            logits_output = runner.forward(forward_batch).logits_output
            logits = logits_output.next_token_logits[select_index]
            _, topk_index = fast_topk(torch.softmax(logits, dim=-1), 1, dim=-1)
            topk_index_list.append(topk_index)
            if step < self.speculative_num_steps - 1:
                _rotate(forward_batch, topk_index, select_index)
        return topk_index_list

    def _build_steps(self, forward_batch: ForwardBatch) -> List[DraftStep]:
        return [
            DraftStep(
                forward_batch=forward_batch,
                attn_backend=runner.attn_backend,
                model_runner=runner,
            )
            for runner in self.draft_runner_list
        ]

    # expect: SG106
    def run_mtp_chain_steps(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        out: List[torch.Tensor] = []
        steps = self._build_steps(forward_batch)
        for i, step in enumerate(steps):
            step.plan()
            logits_output = step.run()
            logits = logits_output.next_token_logits[select_index]
            topk_index = torch.argmax(logits, dim=-1, keepdim=True)
            out.append(topk_index)
            if i < len(steps) - 1:
                _rotate(forward_batch, topk_index, select_index)
        return out

    # expect: clean
    def run_mtp_chain_steps_padded(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        out: List[torch.Tensor] = []
        steps = self._build_steps(forward_batch)
        for i, step in enumerate(steps):
            # DP padding first, so the step's plan sees the final rows.
            step.pad()
            step.plan()
            logits_output = step.run()
            topk_index = torch.argmax(
                logits_output.next_token_logits[select_index], dim=-1, keepdim=True
            )
            out.append(topk_index)
            if i < len(steps) - 1:
                _rotate(forward_batch, topk_index, select_index)
        return out

    # expect: SG106
    def run_mtp_chain_planned_upfront(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        """Plan every layer before the first forward so the plans overlap the
        previous verify; the forwards then run back to back."""
        planners: Sequence[Callable[[ForwardBatch], None]] = [
            partial(runner.attn_backend.init_forward_metadata)
            for runner in self.draft_runner_list
        ]
        if not forward_batch.forward_mode.is_idle():
            for plan in planners:
                plan(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        out: List[torch.Tensor] = []
        for step, runner in enumerate(self.draft_runner_list):
            logits_output = runner.forward(forward_batch).logits_output
            topk_index = torch.argmax(
                logits_output.next_token_logits[select_index], dim=-1, keepdim=True
            )
            out.append(topk_index)
            if step < self.speculative_num_steps - 1:
                _rotate(forward_batch, topk_index, select_index)
        return out

    # expect: clean
    def run_mtp_chain_closure(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        def prepare(runner) -> None:
            # Pad to the DP-synced shape, then plan this layer on it.
            pad_batch_for_dp(forward_batch, runner)
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()

        out: List[torch.Tensor] = []
        for step, runner in enumerate(self.draft_runner_list):
            prepare(runner)
            logits_output = runner.forward(forward_batch).logits_output
            topk_index = torch.argmax(
                logits_output.next_token_logits[select_index], dim=-1, keepdim=True
            )
            out.append(topk_index)
            if step < self.speculative_num_steps - 1:
                _rotate(forward_batch, topk_index, select_index)
        return out
