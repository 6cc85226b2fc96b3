"""Multi-layer EAGLE (MTP with one draft runner per step) worker of the fork.

Derived from ``sglang/srt/speculative/multi_layer_eagle_worker_v2.py``
(``MultiLayerEagleDraftWorker._draft_extend_for_decode`` eager branch).
"""

from __future__ import annotations

import logging
from typing import Dict, List

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.multi_layer_eagle_utils import rotate_input_ids
from sglang.srt.utils.common import fast_topk

from blindsg39.draft.mixins import DpAttentionStateMixin, DraftPlanMixin

logger = logging.getLogger(__name__)


class ForkMultiLayerEagleDraftWorker(DpAttentionStateMixin, DraftPlanMixin):
    def __init__(self, server_args, target_worker, draft_runner_list):
        self.server_args = server_args
        self.target_worker = target_worker
        self.draft_runner_list = draft_runner_list
        self.draft_runner = draft_runner_list[0]
        self.draft_attn_backend = self.draft_runner.attn_backend
        self.topk = server_args.speculative_eagle_topk
        self.speculative_num_steps = server_args.speculative_num_steps
        self.speculative_num_draft_tokens = server_args.speculative_num_draft_tokens
        self.device = target_worker.device
        self.step_backends: Dict[int, object] = {
            step: runner.attn_backend for step, runner in enumerate(draft_runner_list)
        }

    def _bind_step_pools(self, forward_batch: ForwardBatch, step: int) -> None:
        forward_batch.req_to_token_pool = self.draft_runner_list[step].req_to_token_pool
        forward_batch.token_to_kv_pool = self.draft_runner_list[step].token_to_kv_pool

    def _select_and_rotate(self, forward_batch, draft_logits_output, select_index):
        logits_sel = draft_logits_output.logits_output.next_token_logits[select_index]
        probs = torch.softmax(logits_sel, dim=-1)
        ret_topk_p, ret_topk_index = fast_topk(probs, self.topk, dim=-1)
        if forward_batch.extend_seq_lens is not None:
            rotate_input_ids(
                forward_batch.input_ids,
                forward_batch.extend_start_loc,
                forward_batch.extend_seq_lens,
                ret_topk_index,
                select_index,
            )
        return ret_topk_p, ret_topk_index

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode (eager per-step loop)
    # expect: clean
    def _draft_extend_loop(self, forward_batch: ForwardBatch, select_index):
        ret_topk_p_list: List[torch.Tensor] = []
        ret_topk_index_list: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner_list[step].attn_backend.init_forward_metadata(
                    forward_batch
                )
            draft_logits_output = self.draft_runner_list[step].forward(forward_batch)
            topk_p, topk_index = self._select_and_rotate(
                forward_batch, draft_logits_output, select_index
            )
            ret_topk_p_list.append(topk_p)
            ret_topk_index_list.append(topk_index)
        return torch.cat(ret_topk_p_list, dim=1), torch.cat(ret_topk_index_list, dim=1)

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode (eager per-step loop)
    # expect: SG106
    def _draft_extend_loop_marked(self, forward_batch: ForwardBatch, select_index):
        ret_topk_p_list: List[torch.Tensor] = []
        ret_topk_index_list: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner_list[step].attn_backend.init_forward_metadata(
                    forward_batch
                )
                forward_batch.mark_forward_metadata_ready()
            draft_logits_output = self.draft_runner_list[step].forward(forward_batch)
            topk_p, topk_index = self._select_and_rotate(
                forward_batch, draft_logits_output, select_index
            )
            ret_topk_p_list.append(topk_p)
            ret_topk_index_list.append(topk_index)
        return torch.cat(ret_topk_p_list, dim=1), torch.cat(ret_topk_index_list, dim=1)

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode (pre-plan every step backend)
    # expect: SG106
    def _plan_all_steps_then_run(self, forward_batch: ForwardBatch, select_index):
        if not forward_batch.forward_mode.is_idle():
            for step, backend in self.step_backends.items():
                backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        outputs = []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            draft_logits_output = self.draft_runner_list[step].forward(forward_batch)
            outputs.append(
                self._select_and_rotate(forward_batch, draft_logits_output, select_index)
            )
        return outputs

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode (pre-plan every step backend)
    # expect: clean
    def _plan_all_steps_then_run_gated(self, forward_batch: ForwardBatch, select_index):
        if not forward_batch.forward_mode.is_idle():
            for step, backend in self.step_backends.items():
                backend.init_forward_metadata(forward_batch)
            if not self.dp_attention_on:
                forward_batch.mark_forward_metadata_ready()
        outputs = []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            draft_logits_output = self.draft_runner_list[step].forward(forward_batch)
            outputs.append(
                self._select_and_rotate(forward_batch, draft_logits_output, select_index)
            )
        return outputs

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (pre-plan through an inherited mixin helper)
    # expect: SG106
    def draft_steps_preplanned(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self._preplan_draft(forward_batch)
        logits = []
        for step in range(self.speculative_num_steps - 1):
            self._bind_step_pools(forward_batch, step)
            out = self.draft_runner_list[step].forward(forward_batch).logits_output
            forward_batch.input_ids = torch.argmax(out.next_token_logits, dim=-1)
            forward_batch.positions.add_(1)
            logits.append(out.next_token_logits)
        return logits


class ReplanMultiLayerEagleDraftWorker(ForkMultiLayerEagleDraftWorker):
    """Multi-layer worker with a replannable draft pre-plan mark."""

    replan_after_pad = True

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (pre-plan through an inherited mixin helper)
    # expect: clean
    def draft_steps_preplanned(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self._preplan_draft(forward_batch)
        logits = []
        for step in range(self.speculative_num_steps - 1):
            self._bind_step_pools(forward_batch, step)
            out = self.draft_runner_list[step].forward(forward_batch).logits_output
            forward_batch.input_ids = torch.argmax(out.next_token_logits, dim=-1)
            forward_batch.positions.add_(1)
            logits.append(out.next_token_logits)
        return logits
