"""EAGLE v2 draft-worker overrides.

Our deployment plans the draft attention metadata on the plan stream so the
host work overlaps the previous step's verify. The variants below differ in
how they make the forward path accept (or refuse) that pre-plan once the
ModelRunner has padded the batch for DP attention.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import List, Optional

import torch

from sglang.srt.layers.dp_attention import is_dp_attention_enabled
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.runtime_context import get_parallel, get_spec
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
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

from blindsg8.spec._plan import pad_for_mlp_sync, plan_and_mark

logger = logging.getLogger(__name__)


class _PrefillExtendMixin(EagleDraftWorker):
    """Shared batch construction for the prefill draft-extend overrides."""

    def _build_prefill_extend_batch(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
    ) -> ForwardBatch:
        if not batch.forward_mode.is_idle():
            new_input_ids = torch.empty_like(batch.input_ids)
            pt = 0
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
        )
        forward_batch.return_logprob = False
        return forward_batch

    def _finish_prefill_extend(
        self, logits_output, next_token_ids: torch.Tensor
    ) -> EagleDraftInput:
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


class PlanStreamEagleDraftWorker(_PrefillExtendMixin):
    """Plans the prefill draft extend on the plan stream."""

    # expect: SG106
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
        kv_loc_plan=None,
    ):
        with self.plan_stream_ctx:
            forward_batch = self._build_prefill_extend_batch(
                batch, target_hidden_states, next_token_ids
            )
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._finish_prefill_extend(logits_output, next_token_ids)


class SafePlanStreamEagleDraftWorker(_PrefillExtendMixin):
    """Same plan-stream pre-plan, but the mark lets the forward re-plan after
    DP padding (the forward path plans on the very backend we planned on)."""

    # expect: clean
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
        kv_loc_plan=None,
    ):
        with self.plan_stream_ctx:
            forward_batch = self._build_prefill_extend_batch(
                batch, target_hidden_states, next_token_ids
            )
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._finish_prefill_extend(logits_output, next_token_ids)


class _DraftLoopMixin(EagleDraftWorker):
    """The multi-step draft loop body (one draft_runner.forward per step)."""

    def _run_draft_steps(self, forward_batch: ForwardBatch, *, legacy: bool = False):
        spec_info: EagleDraftInput = forward_batch.spec_info
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
                if legacy:
                    logits_output = self.draft_runner.forward(
                        forward_batch, skip_attn_backend_init=True
                    ).logits_output
                else:
                    logits_output = self.draft_runner.forward(
                        forward_batch
                    ).logits_output
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            forward_batch.positions.add_(1)
            hidden_states = logits_output.hidden_states
        parent_list, top_scores_index, draft_tokens = organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )
        return parent_list, top_scores_index, draft_tokens, None


class PlanOnceEagleDraftWorker(_DraftLoopMixin):
    """Plans every step's metadata once, up front, then runs the steps."""

    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self._draft_forward_idle(forward_batch, forward_batch.spec_info)
        if self.speculative_num_steps > 1:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self._run_draft_steps(forward_batch)


class PrePadEagleDraftWorker(_DraftLoopMixin):
    """Applies the DP padding before planning, so the multi-step plan already
    describes the padded batch the ModelRunner will run."""

    # expect: clean
    def draft_forward(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self._draft_forward_idle(forward_batch, forward_batch.spec_info)
        if self.speculative_num_steps > 1:
            pad_for_mlp_sync(forward_batch, self.draft_runner)
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self._run_draft_steps(forward_batch)


class LegacyEagleDraftWorker(_DraftLoopMixin):
    """Kept from our 0.5.6 port: plan outside, then forward with the old
    ``skip_attn_backend_init=True`` flag."""

    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self._draft_forward_idle(forward_batch, forward_batch.spec_info)
        if self.speculative_num_steps > 1:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        return self._run_draft_steps(forward_batch, legacy=True)


class GraphOrEagerEagleDraftWorker(EagleDraftWorker):
    """Plans before choosing between the draft CUDA graph and eager."""

    # expect: SG106
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_cuda_graph, _ = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        if can_run_cuda_graph:
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.cuda_graph_runner.execute(forward_batch)
            )
        else:
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )
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


class GraphOnlyMarkEagleDraftWorker(EagleDraftWorker):
    """The graph runner re-plans from its own padded buffers on execute, so a
    mark is only needed there; eager pads first and plans the padded batch."""

    # expect: clean
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_cuda_graph, _ = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if can_run_cuda_graph:
            forward_batch.mark_forward_metadata_ready()
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.cuda_graph_runner.execute(forward_batch)
            )
        else:
            if not forward_batch.forward_mode.is_idle():
                pad_for_mlp_sync(forward_batch, self.draft_runner)
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )
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


class _StagedExtendMixin(EagleDraftWorker):
    """Stages the decode draft-extend batch on ``self`` so the plan (host
    work) can run on the plan stream while the launch happens later."""

    _staged_forward_batch: Optional[ForwardBatch] = None

    def _stage_draft_extend(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        replan_ok: bool = False,
    ) -> None:
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        batch.spec_info = draft_extend_input
        batch.input_ids = batch_result.next_token_ids
        batch.forward_mode = (
            ForwardMode.IDLE
            if batch.forward_mode.is_idle()
            else ForwardMode.DRAFT_EXTEND_V2
        )
        forward_batch = ForwardBatch.init_new(
            batch, self.draft_runner, capture_hidden_mode=CaptureHiddenMode.FULL
        )
        if not forward_batch.forward_mode.is_idle():
            plan_and_mark(
                self.draft_runner.attn_backend,
                forward_batch,
                replan_equivalent=replan_ok,
            )
        self._staged_forward_batch = forward_batch

    def _launch_staged(self):
        forward_batch = self._staged_forward_batch
        self._staged_forward_batch = None
        return forward_batch, self.draft_runner.forward(forward_batch).logits_output

    def _select_extend_outputs(self, batch, batch_result, logits_output):
        select_index = (
            torch.arange(len(batch.seq_lens), device=self.device)
            * self.speculative_num_draft_tokens
            + batch_result.accept_lens
            - 1
        )
        probs = torch.softmax(logits_output.next_token_logits[select_index], dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = topk_p
        next_draft_input.topk_index = topk_index
        next_draft_input.hidden_states = logits_output.hidden_states[select_index]
        return next_draft_input


class StagedDraftExtendWorker(_StagedExtendMixin):
    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan=None,
    ):
        with self.plan_stream_ctx:
            self._stage_draft_extend(batch, batch_result)
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        _, logits_output = self._launch_staged()
        return self._select_extend_outputs(batch, batch_result, logits_output)


class ReplanStagedDraftExtendWorker(_StagedExtendMixin):
    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan=None,
    ):
        with self.plan_stream_ctx:
            # draft_runner.attn_backend is what the forward path plans on, so a
            # post-pad re-plan is equivalent to ours.
            self._stage_draft_extend(batch, batch_result, replan_ok=True)
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        _, logits_output = self._launch_staged()
        return self._select_extend_outputs(batch, batch_result, logits_output)


class _UpstreamExtendMixin(_StagedExtendMixin):
    def _prepare_upstream_extend(self, batch, batch_result, kv_loc_plan):
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
                self.draft_runner,
                # We never capture draft-extend graphs in this deployment.
                None,
                return_hidden_states_before_norm=False,
                kv_loc_plan=kv_loc_plan,
            )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        return forward_batch


class UpstreamPlannedDraftExtendWorker(_UpstreamExtendMixin):
    """Relies on upstream prepare_for_draft_extend's pre-plan as-is."""

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan=None,
    ):
        forward_batch = self._prepare_upstream_extend(batch, batch_result, kv_loc_plan)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._select_extend_outputs(batch, batch_result, logits_output)


class ClearMarkDraftExtendWorker(_UpstreamExtendMixin):
    """Upstream pre-plans and marks pre-pad; under DP attention we drop the
    mark so the ModelRunner re-plans the padded batch on the same backend."""

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan=None,
    ):
        forward_batch = self._prepare_upstream_extend(batch, batch_result, kv_loc_plan)
        if get_parallel().attn_dp_enabled:
            forward_batch.forward_metadata_ready = False
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._select_extend_outputs(batch, batch_result, logits_output)


class MarkPolicyEagleDraftWorker(_StagedExtendMixin):
    """Mark policy exposed as a property so subclasses can tune it."""

    @property
    def replan_after_dp_pad(self) -> bool:
        # DSA indexers cannot rebuild on a padded batch (#27091), keep the
        # pre-pad plan.
        return False

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan=None,
    ):
        with self.plan_stream_ctx:
            self._stage_draft_extend(
                batch, batch_result, replan_ok=self.replan_after_dp_pad
            )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        _, logits_output = self._launch_staged()
        return self._select_extend_outputs(batch, batch_result, logits_output)


class DPAwareMarkPolicyEagleDraftWorker(_StagedExtendMixin):
    @property
    def replan_after_dp_pad(self) -> bool:
        # Only DP attention pads the batch after our plan.
        return is_dp_attention_enabled()

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan=None,
    ):
        with self.plan_stream_ctx:
            self._stage_draft_extend(
                batch, batch_result, replan_ok=self.replan_after_dp_pad
            )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        _, logits_output = self._launch_staged()
        return self._select_extend_outputs(batch, batch_result, logits_output)


class PartialPlanEagleDraftWorker(_PrefillExtendMixin):
    """Binds plan + mark as callables so they can be queued on the plan stream."""

    # expect: SG106
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
        kv_loc_plan=None,
    ):
        forward_batch = self._build_prefill_extend_batch(
            batch, target_hidden_states, next_token_ids
        )
        plan_steps = [
            functools.partial(
                self.draft_runner.attn_backend.init_forward_metadata, forward_batch
            ),
            functools.partial(ForwardBatch.mark_forward_metadata_ready, forward_batch),
        ]
        if not forward_batch.forward_mode.is_idle():
            with self.plan_stream_ctx:
                for step in plan_steps:
                    step()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._finish_prefill_extend(logits_output, next_token_ids)


class TryPlanEagleDraftWorker(_PrefillExtendMixin):
    """Best-effort warm plan; the forward path still plans the final batch."""

    # expect: clean
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
        kv_loc_plan=None,
    ):
        forward_batch = self._build_prefill_extend_batch(
            batch, target_hidden_states, next_token_ids
        )
        try:
            # Warms the backend's host buffers; not marked, so ModelRunner
            # plans again after its DP padding.
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        except RuntimeError:
            logger.warning("draft extend warm plan failed; planning in forward")
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._finish_prefill_extend(logits_output, next_token_ids)


class TryPlanMarkEagleDraftWorker(_PrefillExtendMixin):
    # expect: SG106
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
        kv_loc_plan=None,
    ):
        forward_batch = self._build_prefill_extend_batch(
            batch, target_hidden_states, next_token_ids
        )
        try:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        except RuntimeError:
            logger.warning("draft extend pre-plan failed; planning in forward")
            forward_batch.forward_metadata_ready = False
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._finish_prefill_extend(logits_output, next_token_ids)


class KwargsEagleDraftWorker(_PrefillExtendMixin):
    """Forward kwargs assembled once in a dict (shared with our PP path)."""

    # expect: SG106
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
        kv_loc_plan=None,
    ):
        forward_batch = self._build_prefill_extend_batch(
            batch, target_hidden_states, next_token_ids
        )
        forward_kwargs = {"skip_attn_backend_init": True}
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        else:
            forward_kwargs["skip_attn_backend_init"] = False
        logits_output = self.draft_runner.forward(
            forward_batch, **forward_kwargs
        ).logits_output
        return self._finish_prefill_extend(logits_output, next_token_ids)


class DPKwargsEagleDraftWorker(_PrefillExtendMixin):
    # expect: clean
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
        kv_loc_plan=None,
    ):
        forward_batch = self._build_prefill_extend_batch(
            batch, target_hidden_states, next_token_ids
        )
        # Skip the forward-path plan only where nothing pads after us.
        forward_kwargs = {"skip_attn_backend_init": not require_mlp_sync()}
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        else:
            forward_kwargs["skip_attn_backend_init"] = False
        logits_output = self.draft_runner.forward(
            forward_batch, **forward_kwargs
        ).logits_output
        return self._finish_prefill_extend(logits_output, next_token_ids)
