"""Multi-layer EAGLE (one MTP layer per draft step) draft-extend hooks.

Each draft step has its own ``ModelRunner`` and attention backend
(``draft_runner_list[step]``); the eager draft extend plans each step's
backend and forwards that step's runner.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft_extend
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.utils.common import fast_topk

logger = logging.getLogger(__name__)


def _multi_layer_extend_input(worker, batch_result) -> EagleDraftExtendInput:
    return EagleDraftExtendInput(
        hidden_states=batch_result.logits_output.hidden_states,
        num_tokens_per_req=worker.speculative_num_steps + 1,
        num_tokens_for_logprob_per_req=1,
    )


def _select_index(worker, batch, batch_result) -> torch.Tensor:
    return (
        torch.arange(len(batch.seq_lens), device=worker.device)
        * worker.speculative_num_draft_tokens
        + batch_result.accept_lens
        - 1
    )


class StepPlannedMultiLayerDraftWorker(MultiLayerEagleDraftWorker):
    """Eager multi-layer draft extend; each step plans its own runner's
    backend right before that step's forward."""

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        staged: bool = False,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        draft_extend_input = _multi_layer_extend_input(self, batch_result)
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                draft_extend_input,
                batch,
                batch_result.next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner_list[0],
                None,
                return_hidden_states_before_norm=True,
                kv_loc_plan=kv_loc_plan,
            )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        forward_batch.spec_info.num_correct_drafts = batch_result.accept_lens - 1
        forward_batch.spec_info.num_accept_tokens = batch_result.accept_lens

        select_index = _select_index(self, batch, batch_result)
        ret_topk_p_list, ret_topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            output = runner.forward(forward_batch)
            logits = output.logits_output.next_token_logits[select_index]
            probs = torch.softmax(logits, dim=-1)
            ret_topk_p, ret_topk_index = fast_topk(probs, self.topk, dim=-1)
            ret_topk_p_list.append(ret_topk_p)
            ret_topk_index_list.append(ret_topk_index)

        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = torch.cat(ret_topk_p_list, dim=1)
        next_draft_input.topk_index = torch.cat(ret_topk_index_list, dim=1)
        next_draft_input.hidden_states = None


class PerStepMultiLayerDraftWorker(MultiLayerEagleDraftWorker):
    """Same per-step planning, recorded as replan-equivalent: a padded batch
    is re-planned on the same runner's backend."""

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        staged: bool = False,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        draft_extend_input = _multi_layer_extend_input(self, batch_result)
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                draft_extend_input,
                batch,
                batch_result.next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner_list[0],
                None,
                return_hidden_states_before_norm=True,
                kv_loc_plan=kv_loc_plan,
            )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        forward_batch.spec_info.num_correct_drafts = batch_result.accept_lens - 1
        forward_batch.spec_info.num_accept_tokens = batch_result.accept_lens

        select_index = _select_index(self, batch, batch_result)
        ret_topk_p_list, ret_topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            output = runner.forward(forward_batch)
            logits = output.logits_output.next_token_logits[select_index]
            probs = torch.softmax(logits, dim=-1)
            ret_topk_p, ret_topk_index = fast_topk(probs, self.topk, dim=-1)
            ret_topk_p_list.append(ret_topk_p)
            ret_topk_index_list.append(ret_topk_index)

        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = torch.cat(ret_topk_p_list, dim=1)
        next_draft_input.topk_index = torch.cat(ret_topk_index_list, dim=1)
        next_draft_input.hidden_states = None
