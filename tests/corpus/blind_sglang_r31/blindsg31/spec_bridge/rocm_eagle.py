"""ROCm subclasses of the spec-v2 draft workers.

The aiter MLA backend has no plan-stream overlap, so the draft loop plans
eagerly on the compute stream. Graph replay paths are inherited untouched.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, List

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
    prepare_for_draft_extend,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch

logger = logging.getLogger(__name__)


class RocmEagleDraftWorker(EagleDraftWorker):
    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; ROCm override plans + marks eagerly, the forward happens in the inherited draft_forward
    # expect: SG106
    def draft(self, batch: "ScheduleBatch", *, with_topology: bool = False):
        draft_input = batch.spec_info
        forward_batch, can_run_graph, kv_loc_plan = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if can_run_graph:
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.cuda_graph_runner.execute(forward_batch)
            )
        else:
            if not forward_batch.forward_mode.is_idle():
                # aiter: no plan stream -- plan all steps up front.
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )
        verify_input = build_eagle_verify_input(
            batch,
            draft_input,
            parent_list,
            top_scores_index,
            draft_tokens,
            draft_probs,
            target_worker=self.target_worker,
            topk=self.topk,
            num_steps=self.speculative_num_steps,
            num_draft_tokens=self.speculative_num_draft_tokens,
            tree_mask_mode=self.tree_mask_mode,
            device=self.device,
        )
        if kv_loc_plan is not None:
            verify_input.kv_loc_plan = kv_loc_plan
        return verify_input

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode; prepare_for_draft_extend, then clears the pre-pad mark so the forward plans
    # expect: clean
    def _draft_extend_for_decode(self, batch: "ScheduleBatch", batch_result, *, kv_loc_plan=None):
        next_token_ids = batch_result.next_token_ids.to(torch.int64)
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        forward_batch = prepare_for_draft_extend(
            draft_extend_input,
            batch,
            next_token_ids,
            self.speculative_num_draft_tokens,
            self.draft_runner,
            None,
            return_hidden_states_before_norm=False,
            kv_loc_plan=kv_loc_plan,
        )
        # aiter's MLA metadata is cheap to rebuild: drop the pre-pad plan
        # record so ModelRunner.forward plans the (possibly DP-padded) batch.
        forward_batch.forward_metadata_ready = False
        draft_logits_output = self.draft_runner.forward(forward_batch).logits_output
        select_index = (
            torch.arange(len(batch.seq_lens), device=self.device)
            * self.speculative_num_draft_tokens
            + batch_result.accept_lens
            - 1
        )
        logits = draft_logits_output.next_token_logits[select_index]
        topk_p, topk_index = torch.topk(torch.softmax(logits, -1), self.topk, dim=-1)
        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = topk_p
        next_draft_input.topk_index = topk_index
        next_draft_input.hidden_states = draft_logits_output.hidden_states[select_index]


class RocmMultiLayerEagleDraftWorker(MultiLayerEagleDraftWorker):
    # idiom: speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode (eager loop); per-step runner plan + mark + forward
    # expect: SG106
    def _run_draft_extend_steps_eager(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        topk_index_list: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                # ROCm: each de-tied runner planned its own metadata; tell the
                # forward not to plan it twice.
                forward_batch.mark_forward_metadata_ready()
            out = runner.forward(forward_batch).logits_output
            logits = out.next_token_logits[select_index]
            topk_index_list.append(torch.argmax(logits, dim=-1, keepdim=True))
        return topk_index_list


class RocmFrozenKVMTPDraftWorker(FrozenKVMTPDraftWorker):
    # idiom: speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker._init_frozen_kv_metadata_capture_cuda_graph; eager fallback plans via init_forward_metadata_out_graph + mark, then seed forward
    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        if forward_batch.needs_forward_metadata_init():
            # aiter only implements the out-of-graph entry point; reuse the
            # capture-time helper on the eager path.
            self._init_frozen_kv_metadata_capture_cuda_graph(forward_batch)
        spec_info = forward_batch.spec_info
        forward_batch.input_ids = spec_info.bonus_tokens
        with self._target_kv_pool_view(forward_batch):
            seed_output = self.draft_model_runner.forward(forward_batch).logits_output
        probs = torch.softmax(seed_output.next_token_logits, dim=-1)
        return torch.topk(probs, self.topk, dim=-1)
