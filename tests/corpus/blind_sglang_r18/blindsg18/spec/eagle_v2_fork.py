"""EAGLE v2 draft worker variants used by the fork's overlap scheduler.

The fused variants run the whole multi-step draft loop in one method so the
per-step bookkeeping (positions, out_cache_loc slices, hot-token remap) can be
captured by our profiler in one span.
"""

from __future__ import annotations

import logging
from typing import List, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.runtime_context import get_parallel, get_spec
from sglang.srt.speculative.eagle_info import (
    EagleDraftExtendInput,
    EagleDraftInput,
)
from sglang.srt.speculative.eagle_utils import (
    organize_draft_results,
    per_step_draft_out_cache_loc,
)
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
    prepare_for_draft_extend,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.common import fast_topk, require_mlp_sync

from blindsg18.common.dp_padding import pad_batch_for_dp

logger = logging.getLogger(__name__)


def _next_topk(logits_output, topk: int, hot_token_id: Optional[torch.Tensor]):
    probs = torch.softmax(logits_output.next_token_logits, dim=-1)
    topk_p, topk_index = fast_topk(probs, topk, dim=-1)
    if hot_token_id is not None:
        topk_index = hot_token_id[topk_index]
    return topk_p, topk_index


class FusedDraftLoopWorker(EagleDraftWorker):
    """Draft worker that inlines ``draft_forward`` into ``draft``."""

    # expect: SG106
    def draft_fused(self, batch: ScheduleBatch):
        draft_input: EagleDraftInput = batch.spec_info
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
                # Plan all steps once up front; each step's forward reuses it.
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()

            spec_info = forward_batch.spec_info
            topk_p, topk_index = spec_info.topk_p, spec_info.topk_index
            hidden_states = spec_info.hidden_states
            out_cache_loc = per_step_draft_out_cache_loc(
                forward_batch.out_cache_loc,
                forward_batch.batch_size,
                self.topk,
                self.speculative_num_steps,
            )
            score_list: List[torch.Tensor] = []
            token_list: List[torch.Tensor] = []
            parents_list: List[torch.Tensor] = []
            scores = None
            for i in range(self.speculative_num_steps):
                input_ids, hidden_states, scores, tree_info = select_top_k_tokens(
                    i, topk_p, topk_index, hidden_states, scores, self.topk
                )
                score_list.append(tree_info[0])
                token_list.append(tree_info[1])
                parents_list.append(tree_info[2])
                if i == self.speculative_num_steps - 1:
                    break
                forward_batch.input_ids = input_ids
                forward_batch.out_cache_loc = out_cache_loc[i]
                spec_info.hidden_states = hidden_states
                with forward_context(
                    ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                    forward_batch=forward_batch,
                ):
                    logits_output = self.draft_runner.forward(forward_batch).logits_output
                topk_p, topk_index = _next_topk(logits_output, self.topk, self.hot_token_id)
                forward_batch.positions.add_(1)
                hidden_states = logits_output.hidden_states
            parent_list, top_scores_index, draft_tokens = organize_draft_results(
                score_list, token_list, parents_list, self.speculative_num_draft_tokens
            )
            draft_probs = None

        return build_eagle_verify_input(
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

    # expect: clean
    def draft_fused_single_rank(self, batch: ScheduleBatch):
        """Fused draft loop for deployments without attention DP.

        The up-front plan describes the unpadded batch, which is only the
        batch the steps run when no MLP-sync padding applies.
        """
        if get_parallel().attn_dp_enabled or require_mlp_sync():
            raise NotImplementedError(
                "draft_fused_single_rank pre-plans the draft batch before the "
                "runner's DP padding; use draft() with --enable-dp-attention"
            )
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_graph, _ = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if can_run_graph:
            parent_list, top_scores_index, draft_tokens, _ = (
                self.cuda_graph_runner.execute(forward_batch)
            )
        else:
            if not forward_batch.forward_mode.is_idle():
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            spec_info = forward_batch.spec_info
            topk_p, topk_index = spec_info.topk_p, spec_info.topk_index
            hidden_states = spec_info.hidden_states
            out_cache_loc = per_step_draft_out_cache_loc(
                forward_batch.out_cache_loc,
                forward_batch.batch_size,
                self.topk,
                self.speculative_num_steps,
            )
            score_list, token_list, parents_list = [], [], []
            scores = None
            for i in range(self.speculative_num_steps):
                input_ids, hidden_states, scores, tree_info = select_top_k_tokens(
                    i, topk_p, topk_index, hidden_states, scores, self.topk
                )
                score_list.append(tree_info[0])
                token_list.append(tree_info[1])
                parents_list.append(tree_info[2])
                if i == self.speculative_num_steps - 1:
                    break
                forward_batch.input_ids = input_ids
                forward_batch.out_cache_loc = out_cache_loc[i]
                spec_info.hidden_states = hidden_states
                with forward_context(
                    ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                    forward_batch=forward_batch,
                ):
                    logits_output = self.draft_runner.forward(forward_batch).logits_output
                topk_p, topk_index = _next_topk(logits_output, self.topk, self.hot_token_id)
                forward_batch.positions.add_(1)
                hidden_states = logits_output.hidden_states
            parent_list, top_scores_index, draft_tokens = organize_draft_results(
                score_list, token_list, parents_list, self.speculative_num_draft_tokens
            )
        return parent_list, top_scores_index, draft_tokens

    # expect: clean
    def draft_fused_prepadded(self, batch: ScheduleBatch):
        """Fused draft loop that applies the DP padding before planning, so
        the single up-front plan already covers the padded rows."""
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_graph, _ = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)[:3]

        spec_info = forward_batch.spec_info
        topk_p, topk_index = spec_info.topk_p, spec_info.topk_index
        hidden_states = spec_info.hidden_states
        out_cache_loc = per_step_draft_out_cache_loc(
            forward_batch.out_cache_loc,
            forward_batch.batch_size,
            self.topk,
            self.speculative_num_steps,
        )
        # Per-token tensors must hold one step's tokens before padding.
        forward_batch.out_cache_loc = out_cache_loc[0]
        # Pad first: the per-step forwards below re-apply the same counts,
        # and the single plan already covers the padded rows.
        pad_batch_for_dp(forward_batch, self.draft_runner)
        if not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        score_list, token_list, parents_list = [], [], []
        scores = None
        for i in range(self.speculative_num_steps):
            input_ids, hidden_states, scores, tree_info = select_top_k_tokens(
                i, topk_p, topk_index, hidden_states, scores, self.topk
            )
            score_list.append(tree_info[0])
            token_list.append(tree_info[1])
            parents_list.append(tree_info[2])
            if i == self.speculative_num_steps - 1:
                break
            forward_batch.input_ids = input_ids
            forward_batch.out_cache_loc = out_cache_loc[i]
            spec_info.hidden_states = hidden_states
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            topk_p, topk_index = _next_topk(logits_output, self.topk, self.hot_token_id)
            forward_batch.positions.add_(1)
            hidden_states = logits_output.hidden_states
        return organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )


class DraftExtendOverlapWorker(EagleDraftWorker):
    """Draft worker that prepares its draft-extend batches on the plan stream."""

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result,
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
        if self.plan_stream:
            self.plan_stream.wait_stream(torch.cuda.current_stream())
        with self.plan_stream_ctx:
            # Plans (and marks) the batch when the draft-extend graph can't run.
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
            torch.cuda.current_stream().wait_stream(self.plan_stream)

        can_run_graph = (
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_run_graph:
            draft_logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            draft_logits_output = self.draft_runner.forward(forward_batch).logits_output
            draft_logits_output.next_token_logits = draft_logits_output.next_token_logits[
                select_index
            ]
            if draft_logits_output.hidden_states is not None:
                draft_logits_output.hidden_states = draft_logits_output.hidden_states[
                    select_index
                ]

        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p, next_draft_input.topk_index = _next_topk(
            draft_logits_output, self.topk, None
        )
        next_draft_input.hidden_states = draft_logits_output.hidden_states

    # expect: SG106
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        """Draft extend after target prefill, planned on the plan stream so the
        attention plan overlaps the target's sampling."""
        if not batch.forward_mode.is_idle():
            pt = 0
            new_input_ids = torch.empty_like(batch.input_ids)
            for i, extend_len in enumerate(batch.extend_lens):
                input_ids = batch.input_ids[pt : pt + extend_len]
                new_input_ids[pt : pt + extend_len].copy_(
                    torch.cat((input_ids[1:], next_token_ids[i].reshape(1)))
                )
                pt += extend_len
            batch.input_ids = new_input_ids

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

        with self.plan_stream_ctx:
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            torch.cuda.current_stream().wait_stream(self.plan_stream)

        logits_output = self.draft_runner.forward(forward_batch).logits_output
        topk_p, topk_index = _next_topk(logits_output, self.topk, None)
        return EagleDraftInput(
            topk_p=topk_p,
            topk_index=topk_index,
            hidden_states=logits_output.hidden_states,
            bonus_tokens=next_token_ids,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )


class ReplannableDraftExtendWorker(EagleDraftWorker):
    """Draft worker for FlashInfer/Triton draft backends, whose eager
    draft-extend plan is equivalent to the forward's own plan."""

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result,
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
        can_run_graph = (
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_run_graph:
            draft_logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            if forward_batch.forward_metadata_ready:
                # The helper planned on draft_runner.attn_backend, the same
                # object the eager forward plans on: let the forward re-plan
                # once DP padding has grown the batch.
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            draft_logits_output = self.draft_runner.forward(forward_batch).logits_output
            draft_logits_output.next_token_logits = draft_logits_output.next_token_logits[
                select_index
            ]
            if draft_logits_output.hidden_states is not None:
                draft_logits_output.hidden_states = draft_logits_output.hidden_states[
                    select_index
                ]
        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p, next_draft_input.topk_index = _next_topk(
            draft_logits_output, self.topk, None
        )
        next_draft_input.hidden_states = draft_logits_output.hidden_states
