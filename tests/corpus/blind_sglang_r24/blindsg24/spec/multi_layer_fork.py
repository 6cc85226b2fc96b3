"""Multi-layer EAGLE (MTP chain) patches: each MTP layer has its own draft
runner and backend; the fork tried planning the prefill draft extend ahead of
each step's forward."""

from dataclasses import replace
from typing import List, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.multi_layer_eagle_utils import rotate_input_ids
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.utils.common import fast_topk


class _MtpPrefillMixin:
    def _mtp_prefill_batch(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        kv_loc_plan=None,
    ) -> ForwardBatch:
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=target_hidden_states,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner_list[0],
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=True,
            kv_loc_plan=kv_loc_plan,
        )
        if not batch.forward_mode.is_idle():
            rotate_input_ids(
                forward_batch.input_ids,
                forward_batch.extend_start_loc,
                forward_batch.extend_seq_lens,
                next_token_ids,
            )
        return forward_batch

    def _bind_step_pools(self, forward_batch: ForwardBatch, step: int) -> None:
        runner = self.draft_runner_list[step]
        forward_batch.req_to_token_pool = runner.req_to_token_pool
        forward_batch.token_to_kv_pool = runner.token_to_kv_pool

    def _collect(self, topk_p_list: List, topk_index_list: List, extend_input, next_token_ids):
        return EagleDraftInput(
            topk_p=torch.cat(topk_p_list, dim=1),
            topk_index=torch.cat(topk_index_list, dim=1),
            hidden_states=extend_input.hidden_states,
            bonus_tokens=next_token_ids,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )


class ForkMultiLayerEagleDraftWorker(_MtpPrefillMixin, MultiLayerEagleDraftWorker):
    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_prefill
    # expect: SG106
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        kv_loc_plan: Optional[object] = None,
    ):
        forward_batch = self._mtp_prefill_batch(
            batch, target_hidden_states, next_token_ids, kv_loc_plan
        )
        extend_input = forward_batch.spec_info
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            step_forward_batch = replace(forward_batch)
            runner = self.draft_runner_list[step]
            if not step_forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(step_forward_batch)
                step_forward_batch.mark_forward_metadata_ready()
            output = runner.forward(step_forward_batch)
            probs = torch.softmax(output.logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
            if forward_batch.extend_seq_lens is not None:
                rotate_input_ids(
                    forward_batch.input_ids,
                    forward_batch.extend_start_loc,
                    forward_batch.extend_seq_lens,
                    topk_index,
                )
        return self._collect(topk_p_list, topk_index_list, extend_input, next_token_ids)

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode (eager loop over draft_runner_list)
    # expect: SG106
    def draft_extend_planned_once(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
    ):
        forward_batch = self._mtp_prefill_batch(
            batch, target_hidden_states, next_token_ids
        )
        extend_input = forward_batch.spec_info
        if not forward_batch.forward_mode.is_idle():
            # All MTP layers read the same geometry; plan it once.
            self.draft_runner_list[0].attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            output = self.draft_runner_list[step].forward(forward_batch)
            probs = torch.softmax(output.logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return self._collect(topk_p_list, topk_index_list, extend_input, next_token_ids)


class ForkMultiLayerEagleDraftWorkerFixed(_MtpPrefillMixin, MultiLayerEagleDraftWorker):
    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode ("Left unmarked on every platform")
    # expect: clean
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        kv_loc_plan: Optional[object] = None,
    ):
        forward_batch = self._mtp_prefill_batch(
            batch, target_hidden_states, next_token_ids, kv_loc_plan
        )
        extend_input = forward_batch.spec_info
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            step_forward_batch = replace(forward_batch)
            runner = self.draft_runner_list[step]
            if not step_forward_batch.forward_mode.is_idle():
                # Unmarked: each runner's forward plans its own backend
                # again after MLP-sync padding.
                runner.attn_backend.init_forward_metadata(step_forward_batch)
            output = runner.forward(step_forward_batch)
            probs = torch.softmax(output.logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
            if forward_batch.extend_seq_lens is not None:
                rotate_input_ids(
                    forward_batch.input_ids,
                    forward_batch.extend_start_loc,
                    forward_batch.extend_seq_lens,
                    topk_index,
                )
        return self._collect(topk_p_list, topk_index_list, extend_input, next_token_ids)

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode; ForwardBatch.needs_forward_metadata_init (replan_equivalent)
    # expect: clean
    def draft_extend_planned_once(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
    ):
        forward_batch = self._mtp_prefill_batch(
            batch, target_hidden_states, next_token_ids
        )
        extend_input = forward_batch.spec_info
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            step_forward_batch = replace(forward_batch)
            runner = self.draft_runner_list[step]
            if not step_forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(step_forward_batch)
                # Same backend the runner would plan with: a post-pad
                # re-plan is equivalent, so opt in.
                step_forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            output = runner.forward(step_forward_batch)
            probs = torch.softmax(output.logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return self._collect(topk_p_list, topk_index_list, extend_input, next_token_ids)
