"""EAGLE draft worker with plan-stream pre-planning for the eager paths.

Mirrors ``sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker`` but keeps
the draft-decode and draft-extend planning outside ``ModelRunner.forward`` so
that it can overlap the previous iteration on the plan stream.
"""

from __future__ import annotations

import functools
import logging
from typing import List, Optional, Tuple

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.async_probe import maybe_detect_nan
from sglang.srt.utils.common import fast_topk

from blindsg17.spec.plan_policy import (
    DRAFT_EXTEND_POLICY,
    MULTI_STEP_DECODE_POLICY,
    DraftPlanPolicy,
    PlannedDraftBatch,
    draft_extend_select_index,
    mark_kwargs_for,
    pad_for_mlp_sync,
    plan_only,
)

logger = logging.getLogger(__name__)


class PrePlannedEagleDraftWorker(EagleDraftWorker):
    """EAGLE draft worker that pre-plans eager draft forwards."""

    def init_attention_backends(self):
        super().init_attention_backends()
        # Draft extend and draft decode plan on different backend objects.
        self._extend_mark_kwargs = {"replan_equivalent": False}
        self._decode_policy = MULTI_STEP_DECODE_POLICY
        self._last_extend_batch: Optional[ForwardBatch] = None

    # ------------------------------------------------------------------
    # Draft decode
    # ------------------------------------------------------------------
    def _prepare_draft_batch(self, batch: ScheduleBatch) -> PlannedDraftBatch:
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_cuda_graph, kv_loc_plan = prepare_for_draft(
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
        return PlannedDraftBatch(
            forward_batch=forward_batch,
            can_run_cuda_graph=bool(can_run_cuda_graph),
            extras={"kv_loc_plan": kv_loc_plan},
        )

    def _build_verify(self, batch, draft_input, outputs, kv_loc_plan):
        parent_list, top_scores_index, draft_tokens, draft_probs = outputs
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

    # expect: SG106
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        prepared = self._prepare_draft_batch(batch)
        forward_batch = prepared.forward_batch

        if prepared.can_run_cuda_graph:
            outputs = self.cuda_graph_runner.execute(forward_batch)
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(
                    **mark_kwargs_for(self._decode_policy)
                )
            outputs = self.draft_forward(forward_batch)

        verify_input = self._build_verify(
            batch, draft_input, outputs, prepared.extras["kv_loc_plan"]
        )
        if with_topology:
            return verify_input, outputs[0], outputs[1]
        return verify_input

    # expect: clean
    def draft_eager_sync(self, batch: ScheduleBatch):
        draft_input: EagleDraftInput = batch.spec_info
        prepared = self._prepare_draft_batch(batch)
        forward_batch = prepared.forward_batch

        if prepared.can_run_cuda_graph:
            outputs = self.cuda_graph_runner.execute(forward_batch)
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                pad_for_mlp_sync(forward_batch, self.draft_runner)
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            outputs = self.draft_forward(forward_batch)

        return self._build_verify(
            batch, draft_input, outputs, prepared.extras["kv_loc_plan"]
        )

    # expect: SG106
    def draft_with_plan_stream(self, batch: ScheduleBatch):
        draft_input: EagleDraftInput = batch.spec_info
        if self.plan_stream:
            self.plan_stream.wait_stream(
                torch.get_device_module(self.device).current_stream()
            )
        with self.plan_stream_ctx:
            prepared = self._prepare_draft_batch(batch)
            forward_batch = prepared.forward_batch
            if not prepared.can_run_cuda_graph and plan_only(
                self.draft_attn_backend, forward_batch
            ):
                forward_batch.forward_metadata_ready = True
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )

        if prepared.can_run_cuda_graph:
            outputs = self.cuda_graph_runner.execute(forward_batch)
        else:
            outputs = self.draft_forward(forward_batch)
        return self._build_verify(
            batch, draft_input, outputs, prepared.extras["kv_loc_plan"]
        )

    # expect: clean
    def draft_on_plan_stream(self, batch: ScheduleBatch):
        draft_input: EagleDraftInput = batch.spec_info
        with self.plan_stream_ctx:
            prepared = self._prepare_draft_batch(batch)
            forward_batch = prepared.forward_batch
            eager_multi_step = (
                not prepared.can_run_cuda_graph
                and not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            )
            if eager_multi_step:
                if get_parallel().attn_dp_enabled:
                    forward_batch.prepare_mlp_sync_batch(self.draft_runner)
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )

        if prepared.can_run_cuda_graph:
            outputs = self.cuda_graph_runner.execute(forward_batch)
        else:
            outputs = self.draft_forward(forward_batch)
        return self._build_verify(
            batch, draft_input, outputs, prepared.extras["kv_loc_plan"]
        )

    # expect: clean
    def draft_dispatch(self, batch: ScheduleBatch):
        draft_input: EagleDraftInput = batch.spec_info
        prepared = self._prepare_draft_batch(batch)
        forward_batch = prepared.forward_batch
        if prepared.can_run_cuda_graph:
            outputs = self.cuda_graph_runner.execute(forward_batch)
            return self._build_verify(
                batch, draft_input, outputs, prepared.extras["kv_loc_plan"]
            )

        if get_parallel().attn_dp_enabled:
            outputs = self.draft_forward_staged(forward_batch)
        else:
            if not forward_batch.forward_mode.is_idle():
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            outputs = self.draft_forward(forward_batch)
        return self._build_verify(
            batch, draft_input, outputs, prepared.extras["kv_loc_plan"]
        )

    def _draft_steps(self, forward_batch: ForwardBatch):
        spec_info: EagleDraftInput = forward_batch.spec_info
        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
        )
        out_cache_loc = forward_batch.out_cache_loc.reshape(
            forward_batch.batch_size, self.topk, self.speculative_num_steps
        )
        out_cache_loc = out_cache_loc.permute((2, 0, 1)).reshape(
            self.speculative_num_steps, -1
        )
        scores = None
        score_list: List[torch.Tensor] = []
        token_list: List[torch.Tensor] = []
        parents_list: List[torch.Tensor] = []
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
            maybe_detect_nan(logits_output.next_token_logits, f"draft step {i}")
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            hidden_states = logits_output.hidden_states
            forward_batch.positions.add_(1)
        parent_list, top_scores_index, draft_tokens = organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )
        return parent_list, top_scores_index, draft_tokens, None

    # expect: SG106
    def draft_forward_with_policy(
        self, forward_batch: ForwardBatch, policy: DraftPlanPolicy = MULTI_STEP_DECODE_POLICY
    ):
        if forward_batch.forward_mode.is_idle():
            return self._draft_forward_idle(forward_batch, forward_batch.spec_info)
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        if policy.mark_after_plan:
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=policy.replan_equivalent
            )
        return self._draft_steps(forward_batch)

    # expect: clean
    def draft_forward_staged(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self._draft_forward_idle(forward_batch, forward_batch.spec_info)
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if pad_for_mlp_sync(forward_batch, self.draft_runner):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self._draft_steps(forward_batch)

    # ------------------------------------------------------------------
    # Draft extend
    # ------------------------------------------------------------------
    def _new_draft_extend_batch(
        self,
        batch: ScheduleBatch,
        hidden_states: torch.Tensor,
        accept_lens: torch.Tensor,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ) -> ForwardBatch:
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=hidden_states,
            num_correct_drafts=accept_lens - 1,
            num_accept_tokens=accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        batch.forward_mode = (
            ForwardMode.IDLE
            if batch.forward_mode.is_idle()
            else ForwardMode.DRAFT_EXTEND_V2
        )
        return ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
            kv_loc_plan=kv_loc_plan,
        )

    # expect: SG106
    def _draft_extend_for_decode(self, batch: ScheduleBatch, batch_result):
        forward_batch = self._new_draft_extend_batch(
            batch,
            batch_result.logits_output.hidden_states,
            batch_result.accept_lens,
        )
        can_run_graph = (
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        select_index = draft_extend_select_index(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        if can_run_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(**self._extend_mark_kwargs)
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            logits_output.next_token_logits = logits_output.next_token_logits[
                select_index
            ]
            logits_output.hidden_states = logits_output.hidden_states[select_index]
        self._last_extend_batch = forward_batch
        return logits_output

    # expect: clean
    def draft_extend_decode_step(self, batch: ScheduleBatch, batch_result):
        forward_batch = self._new_draft_extend_batch(
            batch,
            batch_result.logits_output.hidden_states,
            batch_result.accept_lens,
        )
        can_run_graph = (
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        select_index = draft_extend_select_index(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        if can_run_graph:
            return self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(
                **mark_kwargs_for(DRAFT_EXTEND_POLICY)
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        logits_output.hidden_states = logits_output.hidden_states[select_index]
        return logits_output

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
        if mm_input_embeds is not None:
            forward_batch.mm_input_embeds = mm_input_embeds

        plan = functools.partial(
            self.draft_runner.attn_backend.init_forward_metadata, forward_batch
        )
        if not forward_batch.forward_mode.is_idle():
            plan()
            forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        maybe_detect_nan(logits_output.next_token_logits, "draft_extend_for_prefill")
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        return EagleDraftInput(
            topk_p=topk_p,
            topk_index=topk_index,
            hidden_states=logits_output.hidden_states,
            bonus_tokens=next_token_ids,
        )

    # expect: clean
    def draft_extend_prefill_step(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
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
        plan = functools.partial(
            self.draft_runner.attn_backend.init_forward_metadata, forward_batch
        )
        if not forward_batch.forward_mode.is_idle():
            plan()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        return EagleDraftInput(
            topk_p=topk_p,
            topk_index=topk_index,
            hidden_states=logits_output.hidden_states,
            bonus_tokens=next_token_ids,
        )

    def _prepare_extend_batch(
        self, batch: ScheduleBatch, batch_result
    ) -> Tuple[ForwardBatch, bool, bool]:
        forward_batch = self._new_draft_extend_batch(
            batch,
            batch_result.logits_output.hidden_states,
            batch_result.accept_lens,
        )
        can_run_graph = bool(
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        planned = False
        if not can_run_graph:
            planned = plan_only(self.draft_runner.attn_backend, forward_batch)
        return forward_batch, can_run_graph, planned

    # expect: SG106
    def draft_extend_overlap_v2(self, batch: ScheduleBatch, batch_result):
        with self.plan_stream_ctx:
            forward_batch, can_run_graph, planned = self._prepare_extend_batch(
                batch, batch_result
            )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        if planned:
            forward_batch.mark_forward_metadata_ready()
        select_index = draft_extend_select_index(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        if can_run_graph:
            return self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        out = self.draft_runner.forward(forward_batch)
        logits_output = out.logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        return logits_output

    # expect: clean
    def draft_extend_overlapped(self, batch: ScheduleBatch, batch_result):
        with self.plan_stream_ctx:
            forward_batch, can_run_graph, planned = self._prepare_extend_batch(
                batch, batch_result
            )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        if planned and not get_parallel().attn_dp_enabled:
            forward_batch.mark_forward_metadata_ready()
        select_index = draft_extend_select_index(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        if can_run_graph:
            return self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        out = self.draft_runner.forward(forward_batch)
        logits_output = out.logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        return logits_output

    # expect: SG106
    def draft_extend_eager(self, batch: ScheduleBatch, batch_result):
        forward_batch = self._new_draft_extend_batch(
            batch,
            batch_result.logits_output.hidden_states,
            batch_result.accept_lens,
        )
        select_index = draft_extend_select_index(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        if (
            self.cuda_graph_runner_for_draft_extend is not None
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        ):
            return self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )

        planners = {
            ForwardMode.DRAFT_EXTEND_V2: self.draft_runner.attn_backend.init_forward_metadata,
        }
        planners[forward_batch.forward_mode](forward_batch)
        forward_batch.apply_deprecated_skip_attn_backend_init(True)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        return logits_output

    # expect: clean
    def draft_extend_eager_v2(self, batch: ScheduleBatch, batch_result):
        forward_batch = self._new_draft_extend_batch(
            batch,
            batch_result.logits_output.hidden_states,
            batch_result.accept_lens,
        )
        select_index = draft_extend_select_index(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output

        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.forward_metadata_ready = False
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        return logits_output
