"""EAGLE v2 draft worker of the fork.

Derived from ``sglang/srt/speculative/eagle_worker_v2.py`` (``EagleDraftWorker``)
with the planning split out into :mod:`blindsg39.draft.mixins`.
"""

from __future__ import annotations

import contextlib
import logging
from functools import partial
from typing import List

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
    prepare_for_draft_extend,
)
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.common import fast_topk

from blindsg39.draft.mixins import (
    DpAttentionStateMixin,
    DraftExtendPlanMixin,
    DraftExtendRunnerMixin,
    DraftPlanMixin,
    VerifyRunnerMixin,
)
from blindsg39.draft.utils import (
    DraftPlanRecord,
    apply_plan_record,
    build_mark_kwargs,
    dp_attention_enabled,
    plan_and_mark,
    plan_draft_decode,
    plan_draft_decode_replannable,
    plan_only,
)

logger = logging.getLogger(__name__)


class ForkEagleDraftWorker(
    DpAttentionStateMixin,
    DraftPlanMixin,
    DraftExtendPlanMixin,
    DraftExtendRunnerMixin,
    VerifyRunnerMixin,
):
    def __init__(self, server_args, target_worker, draft_runner, draft_backends):
        self.server_args = server_args
        self.target_worker = target_worker
        self.draft_runner = draft_runner
        self.req_to_token_pool = target_worker.model_runner.req_to_token_pool
        self.device = target_worker.device
        self.topk = server_args.speculative_eagle_topk
        self.speculative_num_steps = server_args.speculative_num_steps
        self.speculative_num_draft_tokens = server_args.speculative_num_draft_tokens
        self.enable_dp_attention = bool(server_args.enable_dp_attention)
        self.draft_attn_backend, self.draft_extend_attn_backend = draft_backends
        self.cuda_graph_runner = None
        self.cuda_graph_runner_for_draft_extend = None
        self.plan_stream = None
        self.plan_stream_ctx = contextlib.nullcontext()
        self._default_mark_kwargs = {}
        self._planners = {
            "decode": partial(plan_and_mark, self.draft_attn_backend),
            "extend": partial(
                plan_and_mark, self.draft_extend_attn_backend, replan_equivalent=True
            ),
        }

    # ------------------------------------------------------------------
    # Draft decode
    # ------------------------------------------------------------------
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info: EagleDraftInput = forward_batch.spec_info
        out_cache_loc = forward_batch.out_cache_loc
        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
        )
        out_cache_loc = out_cache_loc.reshape(
            forward_batch.batch_size, self.topk, self.speculative_num_steps
        ).permute((2, 0, 1)).reshape(self.speculative_num_steps, -1)

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
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            forward_batch.positions.add_(1)
            hidden_states = logits_output.hidden_states

        parent_list, top_scores_index, draft_tokens = organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )
        return parent_list, top_scores_index, draft_tokens, None

    def _verify_input_from(self, batch, draft_input, parent_list, top_scores_index, draft_tokens, draft_probs):
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
            tree_mask_mode=self.target_worker.model_runner.tree_mask_mode,
            device=self.device,
        )

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft
    # expect: SG106
    def draft(self, batch: ScheduleBatch):
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
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )
        verify_input = self._verify_input_from(
            batch, draft_input, parent_list, top_scores_index, draft_tokens, draft_probs
        )
        if kv_loc_plan is not None:
            verify_input.kv_loc_plan = kv_loc_plan
        return verify_input

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft
    # expect: clean
    def draft_replannable(self, batch: ScheduleBatch):
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
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )
        verify_input = self._verify_input_from(
            batch, draft_input, parent_list, top_scores_index, draft_tokens, draft_probs
        )
        if kv_loc_plan is not None:
            verify_input.kv_loc_plan = kv_loc_plan
        return verify_input

    # idiom: sglang-0.5.6 sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft + draft_forward (skip_attn_backend_init=True)
    # expect: SG106
    def draft_with_skip_flag(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        if not forward_batch.forward_mode.is_idle() and self.speculative_num_steps > 1:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
        )
        token_list = [topk_index]
        for i in range(self.speculative_num_steps - 1):
            forward_batch.input_ids = topk_index.flatten()
            forward_batch.positions.add_(1)
            spec_info.hidden_states = hidden_states
            logits_output = self.draft_runner.forward(
                forward_batch, skip_attn_backend_init=True
            ).logits_output
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            token_list.append(topk_index)
            hidden_states = logits_output.hidden_states
        return torch.cat(token_list, dim=1)

    # idiom: sglang-0.5.6 sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft + draft_forward (skip_attn_backend_init=True)
    # expect: clean
    def draft_with_skip_flag_dp_aware(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        if not forward_batch.forward_mode.is_idle() and self.speculative_num_steps > 1:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        skip_init = not dp_attention_enabled()
        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
        )
        token_list = [topk_index]
        for i in range(self.speculative_num_steps - 1):
            forward_batch.input_ids = topk_index.flatten()
            forward_batch.positions.add_(1)
            spec_info.hidden_states = hidden_states
            logits_output = self.draft_runner.forward(
                forward_batch, skip_attn_backend_init=skip_init
            ).logits_output
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            token_list.append(topk_index)
            hidden_states = logits_output.hidden_states
        return torch.cat(token_list, dim=1)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (planned batch returned by a helper)
    # expect: SG106
    def draft_via_planned_tuple(self, batch: ScheduleBatch):
        planned = plan_draft_decode(
            batch.spec_info,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.draft_attn_backend,
            self.topk,
            self.speculative_num_steps,
        )
        if planned.can_run_cuda_graph:
            outputs = self.cuda_graph_runner.execute(planned.forward_batch)
        else:
            outputs = self.draft_forward(planned.forward_batch)
        verify_input = self._verify_input_from(batch, batch.spec_info, *outputs)
        verify_input.kv_loc_plan = planned.kv_loc_plan
        return verify_input

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (planned batch returned by a helper)
    # expect: clean
    def draft_via_replannable_tuple(self, batch: ScheduleBatch):
        planned = plan_draft_decode_replannable(
            batch.spec_info,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.draft_attn_backend,
            self.topk,
            self.speculative_num_steps,
        )
        if planned.can_run_cuda_graph:
            outputs = self.cuda_graph_runner.execute(planned.forward_batch)
        else:
            outputs = self.draft_forward(planned.forward_batch)
        verify_input = self._verify_input_from(batch, batch.spec_info, *outputs)
        verify_input.kv_loc_plan = planned.kv_loc_plan
        return verify_input

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (planner table)
    # expect: SG106
    def run_decode_via_planner(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self._planners["decode"](forward_batch)
        return self.draft_forward(forward_batch)

    # ------------------------------------------------------------------
    # Draft extend
    # ------------------------------------------------------------------
    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (planner table)
    # expect: clean
    def run_extend_via_planner(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
            self._planners["extend"](forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: SG106
    def _draft_extend_for_decode(self, batch: ScheduleBatch, batch_result):
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
            forward_batch = prepare_for_draft_extend(
                draft_extend_input,
                batch,
                next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner,
                self.cuda_graph_runner_for_draft_extend,
                return_hidden_states_before_norm=False,
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
            draft_logits_output.next_token_logits = (
                draft_logits_output.next_token_logits[select_index]
            )
        return draft_logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: clean
    def _draft_extend_for_decode_repadded(self, batch: ScheduleBatch, batch_result):
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
            forward_batch = prepare_for_draft_extend(
                draft_extend_input,
                batch,
                next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner,
                self.cuda_graph_runner_for_draft_extend,
                return_hidden_states_before_norm=False,
            )
            if self.enable_dp_attention and forward_batch.forward_metadata_ready:
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
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
            draft_logits_output.next_token_logits = (
                draft_logits_output.next_token_logits[select_index]
            )
        return draft_logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill
    # expect: SG106
    def _draft_extend_for_prefill(
        self, batch: ScheduleBatch, target_hidden_states, next_token_ids
    ):
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
        )
        forward_batch.return_logprob = False
        if not forward_batch.forward_mode.is_idle():
            with self.plan_stream_ctx:
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

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill
    # expect: clean
    def _draft_extend_for_prefill_unmarked(
        self, batch: ScheduleBatch, target_hidden_states, next_token_ids
    ):
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
        )
        forward_batch.return_logprob = False
        if not forward_batch.forward_mode.is_idle():
            with self.plan_stream_ctx:
                plan_only(self.draft_runner.attn_backend, forward_batch)
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

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (plan-stream closure)
    # expect: SG106
    def draft_extend_with_closure(self, forward_batch: ForwardBatch):
        backend = self.draft_extend_attn_backend

        def _plan_on_stream():
            with self.plan_stream_ctx:
                backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()

        if not forward_batch.forward_mode.is_idle():
            _plan_on_stream()
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (plan-stream closure)
    # expect: clean
    def draft_extend_with_closure_unpadded(self, forward_batch: ForwardBatch):
        backend = self.draft_extend_attn_backend

        def _plan_on_stream():
            with self.plan_stream_ctx:
                backend.init_forward_metadata(forward_batch)
                if forward_batch.global_num_tokens_cpu is None:
                    forward_batch.mark_forward_metadata_ready()

        if not forward_batch.forward_mode.is_idle():
            _plan_on_stream()
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (mark site)
    # expect: clean
    def draft_extend_with_mark_kwargs(self, forward_batch: ForwardBatch):
        mark_kwargs = build_mark_kwargs(self.dp_attention_on)
        if not forward_batch.forward_mode.is_idle():
            self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(**mark_kwargs)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (mark site)
    # expect: SG106
    def draft_extend_with_default_kwargs(self, forward_batch: ForwardBatch):
        mark_kwargs = dict(self._default_mark_kwargs)
        if not forward_batch.forward_mode.is_idle():
            self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(**mark_kwargs)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (mark site)
    # expect: clean
    def draft_extend_cond_replan(self, forward_batch: ForwardBatch):
        replan = True if self.enable_dp_attention else False
        if not forward_batch.forward_mode.is_idle():
            self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=replan)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (mark site)
    # expect: SG106
    def draft_extend_cond_replan_topk(self, forward_batch: ForwardBatch):
        replan = self.enable_dp_attention and self.topk > 1
        if not forward_batch.forward_mode.is_idle():
            self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=replan)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (eager fallback)
    # expect: clean
    def draft_extend_dp_early_return(self, forward_batch: ForwardBatch):
        if dp_attention_enabled():
            return self.draft_runner.forward(forward_batch).logits_output
        if not forward_batch.forward_mode.is_idle():
            self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (eager fallback)
    # expect: SG106
    def draft_extend_idle_early_return(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (plan record)
    # expect: clean
    def draft_extend_from_record(self, forward_batch: ForwardBatch):
        record = DraftPlanRecord(
            forward_batch, replan_equivalent=self.dp_attention_on
        )
        fb = apply_plan_record(record, self.draft_extend_attn_backend)
        return self.draft_runner.forward(fb).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (plan record)
    # expect: SG106
    def draft_extend_from_default_record(self, forward_batch: ForwardBatch):
        record = DraftPlanRecord(forward_batch)
        fb = apply_plan_record(record, self.draft_extend_attn_backend)
        return self.draft_runner.forward(fb).logits_output

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner.forward(reinit_attn_backend=...) after an EAGLE draft-extend pre-plan
    # expect: SG106
    def draft_extend_reinit(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(
            forward_batch, reinit_attn_backend=True
        ).logits_output

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._forward_raw (pad, then plan) for an EAGLE draft extend
    # expect: clean
    def draft_extend_forward_replanned(self, forward_batch: ForwardBatch):
        output = self._forward_replanned(
            self.draft_runner, self.draft_extend_attn_backend, forward_batch
        )
        return output.logits_output


class LegacyExtendWorker(ForkEagleDraftWorker):
    """Draft-extend worker with the upstream pre-plan mark."""

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (inherited mark site)
    # expect: SG106
    def run_extend(self, forward_batch: ForwardBatch):
        self._plan_extend(forward_batch)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return logits_output


class ReplanExtendWorker(ForkEagleDraftWorker):
    """Draft-extend worker with a replannable pre-plan mark."""

    def _plan_extend(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (overridden mark site)
    # expect: clean
    def run_extend(self, forward_batch: ForwardBatch):
        self._plan_extend(forward_batch)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return logits_output
