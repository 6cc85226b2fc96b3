"""NextN / MTP drafting on the spec-v2 (overlap) workers.

Subclasses SGLang's ``EagleDraftWorker`` / ``EAGLEWorkerV2`` and overrides
single steps; the per-step draft loop lives in ``nextn_draft_forward``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Callable, List, Optional, Sequence, Tuple

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.runtime_context import get_spec
from sglang.srt.speculative.eagle_info import (
    EagleDraftExtendInput,
    EagleDraftInput,
    EagleVerifyInput,
)
from sglang.srt.speculative.eagle_utils import (
    eagle_prepare_for_verify,
    eagle_sample,
    organize_draft_results,
)
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
)
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2, EagleDraftWorker
from sglang.srt.speculative.spec_utils import (
    fast_topk,
    select_top_k_tokens,
    spec_stage_span,
)
from sglang.srt.utils.common import require_mlp_sync

from blindsg34.mtp.planning import (
    build_draft_extend_batch_for_graph,
    build_planned_draft_extend_batch,
)

logger = logging.getLogger(__name__)


class NextNDraftWorker(EagleDraftWorker):
    """DeepSeek NextN draft worker (one MTP layer reused for every step)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Callbacks run once a draft batch has been planned (set by the
        # orchestrator; the default just runs the draft loop).
        self._post_plan_hooks: List[Callable[[ForwardBatch], object]] = [
            self.nextn_draft_forward
        ]

    # -- helpers -------------------------------------------------------------
    def _step_backend(self, step: int):
        return self.draft_attn_backend.attn_backends[step]

    def _prepare_draft_batch(
        self, batch: ScheduleBatch
    ) -> Tuple[ForwardBatch, bool, Optional[KVLocPlan]]:
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

    def nextn_draft_forward(self, forward_batch: ForwardBatch):
        """Per-step NextN draft loop (no planning here)."""
        spec_info: EagleDraftInput = forward_batch.spec_info
        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
        )
        out_cache_loc = forward_batch.out_cache_loc.reshape(
            forward_batch.batch_size, self.topk, self.speculative_num_steps
        ).permute(2, 0, 1).reshape(self.speculative_num_steps, -1)
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
                ForwardContext(attn_backend=self._step_backend(i)),
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

    def _build_verify(self, batch, draft_input, outs, kv_loc_plan):
        parent_list, top_scores_index, draft_tokens, draft_probs = outs
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

    def plan_draft_batch(
        self, batch: ScheduleBatch
    ) -> Tuple[ForwardBatch, bool, Optional[KVLocPlan]]:
        """Prepare + pre-plan the draft batch on the plan stream (helper)."""
        with self.plan_stream_ctx:
            forward_batch, can_run_graph, kv_loc_plan = self._prepare_draft_batch(batch)
            if not can_run_graph and not forward_batch.forward_mode.is_idle():
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        return forward_batch, can_run_graph, kv_loc_plan

    def draft_via_hook(self, batch: ScheduleBatch):
        """Template method: subclasses override ``_prepare_draft_batch`` only."""
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_graph, kv_loc_plan = self._prepare_draft_batch(batch)
        if can_run_graph:
            outs = self.cuda_graph_runner.execute(forward_batch)
        else:
            outs = self.nextn_draft_forward(forward_batch)
        return self._build_verify(batch, draft_input, outs, kv_loc_plan)

    # -- overridden steps ----------------------------------------------------
    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft
    # expect: SG106
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = (
            self._prepare_draft_batch(batch)
        )
        if can_run_decode_cuda_graph:
            outs = self.cuda_graph_runner.execute(forward_batch)
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                # One multi-step plan covers every draft step.
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            outs = self.nextn_draft_forward(forward_batch)
        return self._build_verify(batch, draft_input, outs, kv_loc_plan)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (prepare_for_draft_extend on the plan stream)
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
            torch.arange(len(batch.seq_lens), device=self.device)
            * self.speculative_num_draft_tokens
            + batch_result.accept_lens
            - 1
        )
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
            forward_batch = build_planned_draft_extend_batch(
                draft_extend_input,
                batch,
                batch_result.next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner,
                self.cuda_graph_runner_for_draft_extend,
            )
        if self.plan_stream:
            torch.cuda.current_stream().wait_stream(self.plan_stream)

        runner = self.cuda_graph_runner_for_draft_extend
        if runner and runner.can_run_graph(forward_batch):
            logits_output = runner.execute(forward_batch, select_index)
        else:
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            logits_output.next_token_logits = logits_output.next_token_logits[
                select_index
            ]
            logits_output.hidden_states = logits_output.hidden_states[select_index]
        self._store_next_draft_input(batch_result, logits_output)

    def _store_next_draft_input(self, batch_result, logits_output) -> None:
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        nxt = batch_result.next_draft_input
        nxt.topk_p, nxt.topk_index, nxt.hidden_states = (
            topk_p,
            topk_index,
            logits_output.hidden_states,
        )

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill
    # expect: SG106
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
            # Plan the prefill-shaped draft extend while the target's logits
            # are still being sampled.
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

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (pre-plan, then callbacks run the draft loop)
    # expect: SG106
    def _plan_then_dispatch(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return [hook(forward_batch) for hook in self._post_plan_hooks]
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return [hook(forward_batch) for hook in self._post_plan_hooks]

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (plan_stream_ctx + mark)
    # expect: SG106
    def _extend_on_plan_stream(
        self, batch: ScheduleBatch, draft_extend_input: EagleDraftExtendInput
    ):
        with self.plan_stream_ctx:
            batch.spec_info = draft_extend_input
            batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
            forward_batch = ForwardBatch.init_new(
                batch,
                self.draft_runner,
                capture_hidden_mode=CaptureHiddenMode.FULL,
                return_hidden_states_before_norm=False,
            )
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            torch.cuda.current_stream().wait_stream(self.plan_stream)
        return self.draft_runner.forward(forward_batch).logits_output


class NextNDraftWorkerSingleBackend(NextNDraftWorker):
    """topk == 1: the draft loop runs on the runner's own attention backend
    (as FrozenKVMTPDraftWorker._init_draft_attn_backend does for topk == 1)."""

    def _step_backend(self, step: int):
        return self.draft_runner.attn_backend

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft
    # expect: clean
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        assert self.topk == 1
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = (
            self._prepare_draft_batch(batch)
        )
        if can_run_decode_cuda_graph:
            outs = self.cuda_graph_runner.execute(forward_batch)
        else:
            if not forward_batch.forward_mode.is_idle():
                backend = self.draft_runner.attn_backend
                backend.init_forward_metadata(forward_batch)
                # Same backend object, no view context: a post-pad re-plan by
                # the eager runner is equivalent, so let it re-plan.
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            outs = self.nextn_draft_forward(forward_batch)
        return self._build_verify(batch, draft_input, outs, kv_loc_plan)

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (plan_stream_ctx + mark)
    # expect: clean
    def _extend_on_plan_stream(
        self, batch: ScheduleBatch, draft_extend_input: EagleDraftExtendInput
    ):
        with self.plan_stream_ctx:
            batch.spec_info = draft_extend_input
            batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
            forward_batch = ForwardBatch.init_new(
                batch,
                self.draft_runner,
                capture_hidden_mode=CaptureHiddenMode.FULL,
                return_hidden_states_before_norm=False,
            )
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            if not require_mlp_sync():
                # No MLP-sync padding can follow: the plan-stream plan is final.
                forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            torch.cuda.current_stream().wait_stream(self.plan_stream)
        return self.draft_runner.forward(forward_batch).logits_output


class NextNDraftWorkerGraphAware(NextNDraftWorker):
    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (prepare_for_draft_extend on the plan stream)
    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = (
            torch.arange(len(batch.seq_lens), device=self.device)
            * self.speculative_num_draft_tokens
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
            forward_batch, can_run_graph = build_draft_extend_batch_for_graph(
                draft_extend_input,
                batch,
                batch_result.next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner,
                self.cuda_graph_runner_for_draft_extend,
            )
        if self.plan_stream:
            torch.cuda.current_stream().wait_stream(self.plan_stream)
        if can_run_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            # Unmarked: the eager runner plans after prepare_mlp_sync_batch.
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            logits_output.next_token_logits = logits_output.next_token_logits[
                select_index
            ]
            logits_output.hidden_states = logits_output.hidden_states[select_index]
        self._store_next_draft_input(batch_result, logits_output)


class NextNDraftWorkerPrefillSafe(NextNDraftWorker):
    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill
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
            # The eager extend re-plans with this very backend; opting in lets
            # it catch the DP-padded shape.
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


class EagerPlanningNextNDraftWorker(NextNDraftWorker):
    """Pre-plans the eager draft batch inside the prepare step (perf)."""

    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        return self.draft_via_hook(batch)

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft (subclass hook used by draft_via_hook)
    # expect: SG106
    def _prepare_draft_batch(
        self, batch: ScheduleBatch
    ) -> Tuple[ForwardBatch, bool, Optional[KVLocPlan]]:
        forward_batch, can_run_graph, kv_loc_plan = super()._prepare_draft_batch(batch)
        if not can_run_graph and not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return forward_batch, can_run_graph, kv_loc_plan


class ReplannableNextNDraftWorker(NextNDraftWorker):
    """Same pre-plan, but on the runner's own backend and re-plannable."""

    def _step_backend(self, step: int):
        return self.draft_runner.attn_backend

    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        return self.draft_via_hook(batch)

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft (subclass hook used by draft_via_hook)
    # expect: clean
    def _prepare_draft_batch(
        self, batch: ScheduleBatch
    ) -> Tuple[ForwardBatch, bool, Optional[KVLocPlan]]:
        forward_batch, can_run_graph, kv_loc_plan = super()._prepare_draft_batch(batch)
        if not can_run_graph and not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return forward_batch, can_run_graph, kv_loc_plan


class NextNWorkerV2(EAGLEWorkerV2):
    """Overlap-scheduler orchestrator for NextN drafting."""

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EAGLEWorkerV2.forward_batch_generation
    # expect: SG106
    def forward_batch_generation(
        self, batch: ScheduleBatch, on_publish=None, grammar_barrier=None
    ):
        if batch.forward_mode.is_extend() or batch.is_extend_in_batch:
            return super().forward_batch_generation(
                batch, on_publish=on_publish, grammar_barrier=grammar_barrier
            )
        self.activate_step_by_batch(batch.seq_lens.shape[0])
        draft_worker: NextNDraftWorker = self.draft_worker
        draft_input = batch.spec_info
        with spec_stage_span("draft"):
            forward_batch, can_run_graph, kv_loc_plan = draft_worker.plan_draft_batch(
                batch
            )
            if self.plan_stream:
                torch.cuda.current_stream().wait_stream(self.plan_stream)
            if can_run_graph:
                outs = draft_worker.cuda_graph_runner.execute(forward_batch)
            else:
                outs = draft_worker.nextn_draft_forward(forward_batch)
        batch.spec_info = draft_worker._build_verify(
            batch, draft_input, outs, kv_loc_plan
        )
        batch_output = self.verify(batch, grammar_barrier=grammar_barrier)
        if on_publish is not None:
            on_publish(batch_output.new_seq_lens)
        return batch_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py run_eagle_verify (metadata_ready_pre_pad)
    # expect: clean
    def verify(self, batch: ScheduleBatch, pp_proxy_tensors=None, grammar_barrier=None):
        verify_input: EagleVerifyInput = batch.spec_info
        with self.plan_stream_ctx:
            verify_forward_batch, can_run_cuda_graph = eagle_prepare_for_verify(
                verify_input,
                self.req_to_token_pool,
                batch,
                self.target_worker,
            )
        if self.plan_stream:
            torch.cuda.current_stream().wait_stream(self.plan_stream)
        if not can_run_cuda_graph and not verify_forward_batch.forward_mode.is_idle():
            # Warm the host-side verify arrays early. TARGET_VERIFY is always
            # re-planned by the eager extend path from the final (padded) batch,
            # so the mark only skips nothing there.
            self.target_worker.model_runner.attn_backend.init_forward_metadata(
                verify_forward_batch
            )
            verify_forward_batch.mark_forward_metadata_ready()
        forward_batch_output = self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
            pp_proxy_tensors=pp_proxy_tensors,
        )
        return self._finish_verify(
            batch, verify_input, forward_batch_output, can_run_cuda_graph
        )

    def _finish_verify(
        self, batch, verify_input, forward_batch_output, can_run_cuda_graph
    ) -> GenerationBatchResult:
        logits_output = forward_batch_output.logits_output
        predict, accept_lens, accept_index = eagle_sample(
            verify_input, batch, logits_output
        )
        return GenerationBatchResult(
            logits_output=logits_output,
            next_token_ids=predict,
            can_run_cuda_graph=can_run_cuda_graph,
            accept_lens=accept_lens,
        )
