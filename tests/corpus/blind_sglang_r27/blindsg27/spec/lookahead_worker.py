"""Lookahead draft workers: EAGLE-v2 subclasses with our own draft loop."""

from __future__ import annotations

import logging
from typing import List, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.runtime_context import get_parallel, get_spec
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_utils import (
    organize_draft_results,
    per_step_draft_out_cache_loc,
)
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker, EAGLEWorkerV2
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.common import fast_topk, require_mlp_sync

from blindsg27.config import LookaheadConfig
from blindsg27.spec.batching import build_draft_extend_batch, run_draft_step

logger = logging.getLogger(__name__)


class LookaheadDraftWorker(EagleDraftWorker):
    """EAGLE draft worker running the lookahead chain draft."""

    def __init__(self, server_args, gpu_id, nccl_port, target_worker):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        self.la_cfg = LookaheadConfig.from_spec(get_spec())

    # ---------------------------------------------------------------- helpers
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info: EagleDraftInput = forward_batch.spec_info
        if forward_batch.forward_mode.is_idle():
            return self._draft_forward_idle(forward_batch, spec_info)

        out_cache_loc = per_step_draft_out_cache_loc(
            forward_batch.out_cache_loc,
            forward_batch.batch_size,
            self.topk,
            self.speculative_num_steps,
        )
        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
        )
        if self.hot_token_id is not None:
            topk_index = self.hot_token_id[topk_index]

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
            logits_output = run_draft_step(
                self.draft_runner,
                forward_batch,
                self.draft_attn_backend.attn_backends[i],
            )
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            forward_batch.positions.add_(1)
            if self.hot_token_id is not None:
                topk_index = self.hot_token_id[topk_index]
            hidden_states = logits_output.hidden_states

        parent_list, top_scores_index, draft_tokens = organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )
        return parent_list, top_scores_index, draft_tokens, None

    def _prepare_draft_batch(self, batch: ScheduleBatch):
        return prepare_for_draft(
            batch.spec_info,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
            target_translator=self.target_worker.model_runner.kv_index_translator,
            num_draft_tokens=self.speculative_num_draft_tokens,
        )

    def _build_verify(self, batch, draft_input, parent_list, top_scores_index, draft_tokens, draft_probs, kv_loc_plan):
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
        return verify_input

    def _draft_extend_inputs(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
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
        return draft_extend_input, select_index, next_token_ids

    def _finish_draft_extend(self, batch_result, logits_output, select_index):
        next_token_logits = logits_output.next_token_logits[select_index]
        hidden_states = logits_output.hidden_states[select_index]
        probs = torch.softmax(next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = topk_p
        next_draft_input.topk_index = topk_index
        next_draft_input.hidden_states = hidden_states

    # ------------------------------------------------------------------ cases
    # idiom: eagle_worker_v2.EagleDraftWorker.draft (eager draft: plan the multi-step backend, mark, draft_forward)
    # expect: SG106
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = self._prepare_draft_batch(batch)
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
        verify_input = self._build_verify(
            batch, draft_input, parent_list, top_scores_index, draft_tokens, draft_probs, kv_loc_plan
        )
        if with_topology:
            return verify_input, parent_list, top_scores_index
        return verify_input

    # idiom: eagle_worker_v2.EagleDraftWorker._draft_extend_for_decode + eagle_worker_common.prepare_for_draft_extend (plan and mark inside the batch builder)
    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        draft_extend_input, select_index, next_token_ids = self._draft_extend_inputs(
            batch, batch_result
        )
        forward_batch = build_draft_extend_batch(
            draft_extend_input,
            batch,
            next_token_ids,
            self.speculative_num_draft_tokens,
            self.draft_runner,
        )
        can_run_graph = (
            self.cuda_graph_runner_for_draft_extend is not None
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_run_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
            select_index = torch.arange(len(select_index), device=self.device)
        else:
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    # idiom: eagle_worker_v2.EagleDraftWorker._draft_extend_for_prefill (extend planned with the runner's backend, replan_equivalent=True)
    # expect: clean
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
        kv_loc_plan: Optional[KVLocPlan] = None,
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
            kv_loc_plan=kv_loc_plan,
        )
        forward_batch.return_logprob = False
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
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


class GuardedLookaheadDraftWorker(LookaheadDraftWorker):
    """Lookahead worker for deployments that may enable DP attention."""

    # idiom: eagle_worker_v2.EagleDraftWorker.draft (refuse the eager pre-planned draft when MLP sync pads)
    # expect: clean
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = self._prepare_draft_batch(batch)
        if can_run_decode_cuda_graph:
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.cuda_graph_runner.execute(forward_batch)
            )
        elif forward_batch.forward_mode.is_idle():
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )
        else:
            if require_mlp_sync():
                raise NotImplementedError(
                    "lookahead: the eager multi-step draft is planned before DP "
                    "padding; enable the draft cuda graph with --enable-dp-attention"
                )
            if self.speculative_num_steps > 1:
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )
        verify_input = self._build_verify(
            batch, draft_input, parent_list, top_scores_index, draft_tokens, draft_probs, kv_loc_plan
        )
        if with_topology:
            return verify_input, parent_list, top_scores_index
        return verify_input

    # idiom: eagle_worker_common.prepare_for_draft_extend (pre-plan only when no MLP sync pads the batch)
    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        draft_extend_input, select_index, next_token_ids = self._draft_extend_inputs(
            batch, batch_result
        )
        forward_batch = build_draft_extend_batch(
            draft_extend_input,
            batch,
            next_token_ids,
            self.speculative_num_draft_tokens,
            self.draft_runner,
            preplan_metadata=not require_mlp_sync(),
        )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)


class PlanStreamLookaheadDraftWorker(LookaheadDraftWorker):
    """Builds and plans the draft extend on the plan stream."""

    # idiom: eagle_worker_v2.EagleDraftWorker._draft_extend_for_decode (plan_stream_ctx: build, plan, mark; run on the compute stream)
    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        draft_extend_input, select_index, next_token_ids = self._draft_extend_inputs(
            batch, batch_result
        )
        if self.plan_stream:
            self.plan_stream.wait_stream(torch.cuda.current_stream())
        with self.plan_stream_ctx:
            forward_batch = build_draft_extend_batch(
                draft_extend_input,
                batch,
                next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner,
                preplan_metadata=False,
            )
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            torch.cuda.current_stream().wait_stream(self.plan_stream)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    # idiom: eagle_worker_common.prepare_for_draft_extend (decision carried in a flag: bug only when la_cfg.preplan_draft_extend and no draft-extend graph)
    # expect: SG106
    def _run_draft_extend_eager(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        draft_extend_input, select_index, next_token_ids = self._draft_extend_inputs(
            batch, batch_result
        )
        forward_batch = build_draft_extend_batch(
            draft_extend_input,
            batch,
            next_token_ids,
            self.speculative_num_draft_tokens,
            self.draft_runner,
            preplan_metadata=False,
        )
        graph_runner = self.cuda_graph_runner_for_draft_extend
        use_graph = graph_runner is not None and graph_runner.can_run_graph(forward_batch)
        preplanned = (
            self.la_cfg.preplan_draft_extend
            and not use_graph
            and not forward_batch.forward_mode.is_idle()
        )
        if preplanned:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        if use_graph:
            logits_output = graph_runner.execute(forward_batch, select_index)
            select_index = torch.arange(len(select_index), device=self.device)
        else:
            if preplanned:
                forward_batch.mark_forward_metadata_ready()
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)


class EagerOnlyLookaheadDraftWorker(LookaheadDraftWorker):
    """Draft extend without a draft-extend cuda graph."""

    # idiom: eagle_worker_v2.EagleDraftWorker._draft_extend_for_decode (early returns for idle and graph; eager path plans and marks)
    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        draft_extend_input, select_index, next_token_ids = self._draft_extend_inputs(
            batch, batch_result
        )
        forward_batch = build_draft_extend_batch(
            draft_extend_input,
            batch,
            next_token_ids,
            self.speculative_num_draft_tokens,
            self.draft_runner,
            preplan_metadata=False,
        )
        if forward_batch.forward_mode.is_idle():
            self.draft_runner.forward(forward_batch)
            return
        graph_runner = self.cuda_graph_runner_for_draft_extend
        if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
            logits_output = graph_runner.execute(forward_batch, select_index)
            self._finish_draft_extend(
                batch_result, logits_output, torch.arange(len(select_index), device=self.device)
            )
            return
        attn_backend = self.draft_runner.attn_backend
        attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)


class LookaheadWorker(EAGLEWorkerV2):
    """Top-level worker of the lookahead method."""

    # idiom: eagle_utils.eagle_prepare_for_verify (plan-stream load_batch then mark, only on the cuda-graph path)
    # expect: clean
    def _prepare_target_decode_on_plan_stream(self, batch: ScheduleBatch):
        model_runner = self.target_worker.model_runner
        with self.plan_stream_ctx:
            forward_batch = ForwardBatch.init_new(
                batch,
                model_runner,
                capture_hidden_mode=CaptureHiddenMode.FULL,
                return_hidden_states_before_norm=False,
            )
            graph_runner = model_runner.decode_cuda_graph_runner
            can_run_cuda_graph = bool(
                graph_runner is not None and graph_runner.can_run_graph(forward_batch)
            )
            if can_run_cuda_graph:
                graph_runner.load_batch(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            # Eager: leave it to ModelRunner, which plans after the DP padding.
        if self.plan_stream:
            torch.cuda.current_stream().wait_stream(self.plan_stream)
        return self.target_worker.forward_batch_generation(
            batch=None, forward_batch=forward_batch
        )
