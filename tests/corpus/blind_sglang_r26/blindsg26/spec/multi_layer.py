"""Fork multi-layer EAGLE (MTP with one runner per draft step)."""

from __future__ import annotations

import logging
from typing import List

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft_extend
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.utils.common import fast_topk

from blindsg26.spec.batches import draft_extend_select_index, init_draft_extend_batch

logger = logging.getLogger(__name__)


class ForkMultiLayerEagleDraftWorker(MultiLayerEagleDraftWorker):
    """Eager (non-graph) multi-layer draft extend with per-step planning."""

    def _bind_step_pools(self, forward_batch: ForwardBatch, step: int) -> None:
        runner = self.draft_runner_list[step]
        forward_batch.req_to_token_pool = runner.req_to_token_pool
        forward_batch.token_to_kv_pool = runner.token_to_kv_pool

    def _step_topk(self, logits_output, select_index):
        logits = logits_output.next_token_logits[select_index]
        probs = torch.softmax(logits, dim=-1)
        return fast_topk(probs, self.topk, dim=-1)

    def _fresh_draft_extend_batch(self, batch: ScheduleBatch, batch_result, kv_loc_plan=None):
        return init_draft_extend_batch(
            self.draft_runner_list[0],
            batch,
            batch_result,
            self.speculative_num_draft_tokens,
            self.device,
            kv_loc_plan=kv_loc_plan,
        )

    def _publish(self, batch_result, topk_p_list: List[torch.Tensor], topk_index_list: List[torch.Tensor]):
        nxt = batch_result.next_draft_input
        nxt.topk_p = torch.cat(topk_p_list, dim=1)
        nxt.topk_index = torch.cat(topk_index_list, dim=1)

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode (non-graph loop after prepare_for_draft_extend)
    # expect: SG106
    def _draft_extend_for_decode(self, batch: ScheduleBatch, batch_result, *, kv_loc_plan=None):
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                draft_extend_input,
                batch,
                batch_result.next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner_list[0],
                None,  # fork: no draft-extend graph for the multi-layer path
                return_hidden_states_before_norm=True,
                kv_loc_plan=kv_loc_plan,
            )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        select_index = draft_extend_select_index(
            batch, batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                # Each step has its own runner/backend: plan it for this step.
                self.draft_runner_list[step].attn_backend.init_forward_metadata(
                    forward_batch
                )
            out = self.draft_runner_list[step].forward(forward_batch)
            topk_p, topk_index = self._step_topk(out.logits_output, select_index)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        self._publish(batch_result, topk_p_list, topk_index_list)

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode (per-step plan, marked ready each step)
    # expect: SG106
    def _draft_extend_steps_marked(self, batch: ScheduleBatch, batch_result, kv_loc_plan=None):
        forward_batch, select_index = self._fresh_draft_extend_batch(
            batch, batch_result, kv_loc_plan
        )
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            out = runner.forward(forward_batch)
            topk_p, topk_index = self._step_topk(out.logits_output, select_index)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        self._publish(batch_result, topk_p_list, topk_index_list)

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode ("left unmarked on every platform", fresh unmarked batch)
    # expect: clean
    def _draft_extend_steps_unmarked(self, batch: ScheduleBatch, batch_result, kv_loc_plan=None):
        forward_batch, select_index = self._fresh_draft_extend_batch(
            batch, batch_result, kv_loc_plan
        )
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                # Warm plan only; each runner re-plans after its own DP padding.
                runner.attn_backend.init_forward_metadata(forward_batch)
            out = runner.forward(forward_batch)
            topk_p, topk_index = self._step_topk(out.logits_output, select_index)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        self._publish(batch_result, topk_p_list, topk_index_list)

    # idiom: sglang/srt/model_executor/forward_batch_info.py mark_forward_metadata_ready(replan_equivalent=True) per multi-layer step (runner's own backend)
    # expect: clean
    def _draft_extend_steps_replannable(self, batch: ScheduleBatch, batch_result, kv_loc_plan=None):
        forward_batch, select_index = self._fresh_draft_extend_batch(
            batch, batch_result, kv_loc_plan
        )
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            out = runner.forward(forward_batch)
            topk_p, topk_index = self._step_topk(out.logits_output, select_index)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        self._publish(batch_result, topk_p_list, topk_index_list)
