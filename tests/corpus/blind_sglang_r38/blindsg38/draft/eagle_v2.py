"""Kestrel EAGLE v2 draft workers.

Subclasses SGLang's ``EagleDraftWorker`` to plan the draft attention metadata
with the Kestrel multi-step backend on the plan stream.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
)
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
    prepare_for_draft_extend,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import fast_topk

from blindsg38.vendor_config import (
    KestrelParallelConfig,
    refuse_dp_attention,
    warn_dp_attention,
)

logger = logging.getLogger(__name__)


def _select_last_rows(logits_output, select_index):
    logits_output.next_token_logits = logits_output.next_token_logits[select_index]
    if logits_output.hidden_states is not None:
        logits_output.hidden_states = logits_output.hidden_states[select_index]
    return logits_output


class KestrelEagleDraftWorker(EagleDraftWorker):
    def __init__(
        self,
        server_args: ServerArgs,
        gpu_id: int,
        nccl_port: int,
        target_worker: TpModelWorker,
    ):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        self.kcfg = KestrelParallelConfig.from_server_args(server_args)

    def _mark_preplanned(self, forward_batch: ForwardBatch) -> None:
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=self.kcfg.needs_mlp_sync
        )

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft
    # expect: SG106
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
            target_translator=self.target_worker.model_runner.kv_index_translator,
            num_draft_tokens=self.speculative_num_draft_tokens,
        )
        if can_run_decode_cuda_graph:
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.cuda_graph_runner.execute(forward_batch)
            )
            if draft_probs is not None:
                draft_probs = draft_probs.clone()
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
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
            verify_input.prepared_out_cache_loc = kv_loc_plan.write_virtual
        if with_topology:
            return verify_input, parent_list, top_scores_index
        return verify_input

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        num_correct_drafts = batch_result.accept_lens - 1
        select_index = (
            torch.arange(
                0,
                len(batch.seq_lens) * self.speculative_num_draft_tokens,
                self.speculative_num_draft_tokens,
                device=self.device,
            )
            + batch_result.accept_lens
            - 1
        )
        next_token_ids = batch_result.next_token_ids.to(torch.int64)
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=num_correct_drafts,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                draft_extend_input,
                batch,
                next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner,
                self.cuda_graph_runner_for_draft_extend,
                return_hidden_states_before_norm=False,
                kv_loc_plan=kv_loc_plan,
            )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )

        runner = self.cuda_graph_runner_for_draft_extend
        if runner and runner.can_run_graph(forward_batch):
            draft_logits_output = runner.execute(forward_batch, select_index)
        else:
            draft_logits_output = _select_last_rows(
                self.draft_runner.forward(forward_batch).logits_output, select_index
            )

        probs = torch.softmax(draft_logits_output.next_token_logits, dim=-1)
        ret_topk_p, ret_topk_index = fast_topk(probs, self.topk, dim=-1)
        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = ret_topk_p
        next_draft_input.topk_index = ret_topk_index
        next_draft_input.hidden_states = draft_logits_output.hidden_states

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (eager fallback)
    # expect: clean
    def _run_draft_extend_eager(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        self._mark_preplanned(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output


class KestrelPaddedEagleDraftWorker(KestrelEagleDraftWorker):
    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft
    # expect: clean
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
            target_translator=self.target_worker.model_runner.kv_index_translator,
            num_draft_tokens=self.speculative_num_draft_tokens,
        )
        if can_run_decode_cuda_graph:
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.cuda_graph_runner.execute(forward_batch)
            )
        else:
            real_bs = forward_batch.batch_size
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                if forward_batch.global_num_tokens_cpu is not None:
                    forward_batch.prepare_mlp_sync_batch(self.draft_runner)
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )
            if parent_list is not None:
                parent_list = parent_list[:real_bs]
                top_scores_index = top_scores_index[:real_bs]
                draft_tokens = draft_tokens[:real_bs]

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
            verify_input.prepared_out_cache_loc = kv_loc_plan.write_virtual
        if with_topology:
            return verify_input, parent_list, top_scores_index
        return verify_input

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = (
            torch.arange(
                0,
                len(batch.seq_lens) * self.speculative_num_draft_tokens,
                self.speculative_num_draft_tokens,
                device=self.device,
            )
            + batch_result.accept_lens
            - 1
        )
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
                batch_result.next_token_ids.to(torch.int64),
                self.speculative_num_draft_tokens,
                self.draft_runner,
                self.cuda_graph_runner_for_draft_extend,
                return_hidden_states_before_norm=False,
                kv_loc_plan=kv_loc_plan,
            )
            if forward_batch.forward_metadata_ready:
                # Same backend object as the forward path.
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )

        runner = self.cuda_graph_runner_for_draft_extend
        if runner and runner.can_run_graph(forward_batch):
            draft_logits_output = runner.execute(forward_batch, select_index)
        else:
            draft_logits_output = _select_last_rows(
                self.draft_runner.forward(forward_batch).logits_output, select_index
            )

        probs = torch.softmax(draft_logits_output.next_token_logits, dim=-1)
        ret_topk_p, ret_topk_index = fast_topk(probs, self.topk, dim=-1)
        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = ret_topk_p
        next_draft_input.topk_index = ret_topk_index
        next_draft_input.hidden_states = draft_logits_output.hidden_states


class KestrelGraphFirstDraftWorker(KestrelEagleDraftWorker):
    """Draft-extend graphs replay their own static buffers; keep the mark strict."""

    def _mark_preplanned(self, forward_batch: ForwardBatch) -> None:
        forward_batch.mark_forward_metadata_ready()

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (eager fallback)
    # expect: SG106
    def _run_draft_extend_eager(self, forward_batch: ForwardBatch):
        runner = self.cuda_graph_runner_for_draft_extend
        if runner is not None and runner.can_run_graph(forward_batch):
            return runner.execute(forward_batch, None)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        self._mark_preplanned(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output


def _rotate_prefill_input_ids(batch: ScheduleBatch, next_token_ids: torch.Tensor):
    new_input_ids = torch.empty_like(batch.input_ids)
    pt = 0
    for i, extend_len in enumerate(batch.extend_lens):
        input_ids = batch.input_ids[pt : pt + extend_len]
        new_input_ids[pt : pt + extend_len].copy_(
            torch.cat((input_ids[1:], next_token_ids[i].reshape(1)))
        )
        pt += extend_len
    batch.input_ids = new_input_ids


class KestrelStrictDraftWorker(EagleDraftWorker):
    def __init__(
        self,
        server_args: ServerArgs,
        gpu_id: int,
        nccl_port: int,
        target_worker: TpModelWorker,
    ):
        refuse_dp_attention(server_args, "KestrelStrictDraftWorker")
        super().__init__(server_args, gpu_id, nccl_port, target_worker)

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill
    # expect: clean
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        if not batch.forward_mode.is_idle():
            _rotate_prefill_input_ids(batch, next_token_ids)
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=target_hidden_states,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
            kv_loc_plan=kv_loc_plan,
        )
        forward_batch.return_logprob = False
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        return EagleDraftInput(
            topk_p=topk_p,
            topk_index=topk_index,
            hidden_states=logits_output.hidden_states,
            bonus_tokens=next_token_ids,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )


class KestrelLenientDraftWorker(EagleDraftWorker):
    def __init__(
        self,
        server_args: ServerArgs,
        gpu_id: int,
        nccl_port: int,
        target_worker: TpModelWorker,
    ):
        warn_dp_attention(server_args, "KestrelLenientDraftWorker")
        super().__init__(server_args, gpu_id, nccl_port, target_worker)

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill
    # expect: SG106
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        if not batch.forward_mode.is_idle():
            _rotate_prefill_input_ids(batch, next_token_ids)
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=target_hidden_states,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
            kv_loc_plan=kv_loc_plan,
        )
        forward_batch.return_logprob = False
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        return EagleDraftInput(
            topk_p=topk_p,
            topk_index=topk_index,
            hidden_states=logits_output.hidden_states,
            bonus_tokens=next_token_ids,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
