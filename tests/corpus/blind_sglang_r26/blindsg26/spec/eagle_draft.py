"""Fork EAGLE v2 draft worker: plan-stream pre-planning of draft batches.

Built against SGLang 0.5.23 (``EagleDraftWorker`` in eagle_worker_v2).
The draft-extend strategy is picked once from SGLANG_FORK_DRAFT_EXTEND_STRATEGY.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
    prepare_for_draft_extend,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import fast_topk, require_mlp_sync

from blindsg26.common.planning import plan_and_mark, plan_only
from blindsg26.spec.batches import init_draft_extend_batch
from blindsg26.common.settings import DraftStepSettings

logger = logging.getLogger(__name__)


class ForkEagleDraftWorker(EagleDraftWorker):
    def __init__(self, server_args, gpu_id: int, nccl_port: int, target_worker):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        self.step_settings = DraftStepSettings.from_server_args(server_args)
        strategy = os.environ.get("SGLANG_FORK_DRAFT_EXTEND_STRATEGY", "upstream")
        self._draft_extend_impl = {
            "upstream": self._draft_extend_for_decode,
            "preplanned": self._draft_extend_preplanned,
            "replannable": self._draft_extend_replannable,
            "warm": self._draft_extend_warm,
        }.get(strategy, self._draft_extend_for_decode)

    # ---------------------------------------------------------------- helpers
    def _draft_extend_inputs(self, batch: ScheduleBatch, batch_result):
        ndt = self.speculative_num_draft_tokens
        num_correct_drafts = batch_result.accept_lens - 1
        select_index = (
            torch.arange(0, len(batch.seq_lens) * ndt, ndt, device=self.device)
            + batch_result.accept_lens
            - 1
        )
        next_token_ids = batch_result.next_token_ids.to(torch.int64)
        return num_correct_drafts, select_index, next_token_ids

    def _init_draft_extend_batch(self, batch: ScheduleBatch, batch_result, kv_loc_plan=None):
        """DRAFT_EXTEND_V2 ForwardBatch, built without planning it."""
        return init_draft_extend_batch(
            self.draft_runner,
            batch,
            batch_result,
            self.speculative_num_draft_tokens,
            self.device,
            kv_loc_plan=kv_loc_plan,
        )

    def _publish_draft_extend(self, batch_result, logits_output, select_index):
        logits = logits_output.next_token_logits
        hidden = logits_output.hidden_states
        if select_index is not None:
            logits = logits[select_index]
            hidden = hidden[select_index] if hidden is not None else None
        probs = torch.softmax(logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        nxt = batch_result.next_draft_input
        nxt.topk_p, nxt.topk_index, nxt.hidden_states = topk_p, topk_index, hidden

    def _run_idle_draft_extend(self, forward_batch: ForwardBatch, batch_result):
        # DP attention: an idle rank still joins the collectives.
        self.draft_runner.forward(forward_batch)

    def draft_extend_selected(self, batch: ScheduleBatch, batch_result, kv_loc_plan=None):
        """Entry the fork's orchestrator calls after verify."""
        return self._draft_extend_impl(batch, batch_result, kv_loc_plan=kv_loc_plan)

    @property
    def preplans_draft_extend(self) -> bool:
        return self.step_settings.preplan_draft_extend

    # ------------------------------------------------------------------ cases
    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (multi-step pre-plan + mark on the non-graph branch)
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
                # One plan for every step backend; the step forwards reuse it.
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

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (plan+mark inside eagle_worker_common.prepare_for_draft_extend)
    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result,
        *,
        kv_loc_plan=None,
    ):
        num_correct_drafts, select_index, next_token_ids = self._draft_extend_inputs(
            batch, batch_result
        )
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=num_correct_drafts,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        if self.plan_stream:
            self.plan_stream.wait_stream(
                torch.get_device_module(self.device).current_stream()
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
        graph_runner = self.cuda_graph_runner_for_draft_extend
        if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
            logits_output = graph_runner.execute(forward_batch, select_index)
            self._publish_draft_extend(batch_result, logits_output, None)
            return
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._publish_draft_extend(batch_result, logits_output, select_index)

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (init_forward_metadata + mark_forward_metadata_ready) via common.planning.plan_and_mark
    # expect: SG106
    def _draft_extend_preplanned(self, batch: ScheduleBatch, batch_result, kv_loc_plan=None):
        forward_batch, select_index = self._init_draft_extend_batch(
            batch, batch_result, kv_loc_plan
        )
        if forward_batch.forward_mode.is_idle():
            return self._run_idle_draft_extend(forward_batch, batch_result)
        with self.plan_stream_ctx:
            plan_and_mark(self.draft_runner.attn_backend, forward_batch)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._publish_draft_extend(batch_result, logits_output, select_index)

    # idiom: sglang/srt/model_executor/forward_batch_info.py ForwardBatch.mark_forward_metadata_ready(replan_equivalent=True) for the draft-extend pre-plan
    # expect: clean
    def _draft_extend_replannable(self, batch: ScheduleBatch, batch_result, kv_loc_plan=None):
        forward_batch, select_index = self._init_draft_extend_batch(
            batch, batch_result, kv_loc_plan
        )
        if forward_batch.forward_mode.is_idle():
            return self._run_idle_draft_extend(forward_batch, batch_result)
        with self.plan_stream_ctx:
            # The runner's own backend planned it, so a post-pad re-plan is the
            # same plan on the padded shapes.
            plan_and_mark(
                self.draft_runner.attn_backend, forward_batch, replan_equivalent=True
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._publish_draft_extend(batch_result, logits_output, select_index)

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode ("left unmarked": warm plan, forward re-plans post-pad)
    # expect: clean
    def _draft_extend_warm(self, batch: ScheduleBatch, batch_result, kv_loc_plan=None):
        forward_batch, select_index = self._init_draft_extend_batch(
            batch, batch_result, kv_loc_plan
        )
        if forward_batch.forward_mode.is_idle():
            return self._run_idle_draft_extend(forward_batch, batch_result)
        with self.plan_stream_ctx:
            plan_only(self.draft_runner.attn_backend, forward_batch)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._publish_draft_extend(batch_result, logits_output, select_index)

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (plan through functools.partial, then mark)
    # expect: SG106
    def _draft_extend_partial(self, batch: ScheduleBatch, batch_result, kv_loc_plan=None):
        forward_batch, select_index = self._init_draft_extend_batch(
            batch, batch_result, kv_loc_plan
        )
        if forward_batch.forward_mode.is_idle():
            return self._run_idle_draft_extend(forward_batch, batch_result)
        plan = functools.partial(
            self.draft_runner.attn_backend.init_forward_metadata, forward_batch
        )
        with self.plan_stream_ctx:
            plan()
            forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._publish_draft_extend(batch_result, logits_output, select_index)

    # idiom: sglang/srt/model_executor/forward_batch_info.py ForwardBatch.mark_forward_metadata_ready (functools.partial with replan_equivalent=True)
    # expect: clean
    def _draft_extend_partial_replan(self, batch: ScheduleBatch, batch_result, kv_loc_plan=None):
        forward_batch, select_index = self._init_draft_extend_batch(
            batch, batch_result, kv_loc_plan
        )
        if forward_batch.forward_mode.is_idle():
            return self._run_idle_draft_extend(forward_batch, batch_result)
        mark_planned = functools.partial(
            forward_batch.mark_forward_metadata_ready, replan_equivalent=True
        )
        with self.plan_stream_ctx:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            mark_planned()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._publish_draft_extend(batch_result, logits_output, select_index)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (pre-plan + mark, spec_info restored in finally)
    # expect: SG106
    def _draft_extend_restoring(self, batch: ScheduleBatch, batch_result, kv_loc_plan=None):
        saved_spec_info = batch.spec_info
        saved_forward_mode = batch.forward_mode
        try:
            forward_batch, select_index = self._init_draft_extend_batch(
                batch, batch_result, kv_loc_plan
            )
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finally:
            batch.spec_info = saved_spec_info
            batch.forward_mode = saved_forward_mode
        if not forward_batch.forward_mode.is_idle():
            self._publish_draft_extend(batch_result, logits_output, select_index)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (pre-plan marked replan_equivalent, spec_info restored in finally)
    # expect: clean
    def _draft_extend_restoring_replan(self, batch: ScheduleBatch, batch_result, kv_loc_plan=None):
        saved_spec_info = batch.spec_info
        saved_forward_mode = batch.forward_mode
        try:
            forward_batch, select_index = self._init_draft_extend_batch(
                batch, batch_result, kv_loc_plan
            )
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finally:
            batch.spec_info = saved_spec_info
            batch.forward_mode = saved_forward_mode
        if not forward_batch.forward_mode.is_idle():
            self._publish_draft_extend(batch_result, logits_output, select_index)

    # idiom: sglang/srt/speculative/dflash_worker_v2.py (0.5.18) forward_batch_generation(..., skip_attn_backend_init=True) after planning, on ModelRunner.forward
    # expect: SG106
    def _draft_extend_legacy_kwarg(self, batch: ScheduleBatch, batch_result, kv_loc_plan=None):
        forward_batch, select_index = self._init_draft_extend_batch(
            batch, batch_result, kv_loc_plan
        )
        if forward_batch.forward_mode.is_idle():
            return self._run_idle_draft_extend(forward_batch, batch_result)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        logits_output = self.draft_runner.forward(
            forward_batch, skip_attn_backend_init=True
        ).logits_output
        self._publish_draft_extend(batch_result, logits_output, select_index)

    # idiom: sglang/srt/speculative/dflash_worker_v2.py (0.5.23) skip_attn_backend_init=None under DP attention / MLP sync
    # expect: clean
    def _draft_extend_legacy_kwarg_dp(self, batch: ScheduleBatch, batch_result, kv_loc_plan=None):
        forward_batch, select_index = self._init_draft_extend_batch(
            batch, batch_result, kv_loc_plan
        )
        if forward_batch.forward_mode.is_idle():
            return self._run_idle_draft_extend(forward_batch, batch_result)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        logits_output = self.draft_runner.forward(
            forward_batch,
            skip_attn_backend_init=None if require_mlp_sync() else True,
        ).logits_output
        self._publish_draft_extend(batch_result, logits_output, select_index)

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (pre-plan + mark behind a property); bug only with SGLANG_FORK_PREPLAN_DRAFT_EXTEND=1
    # expect: SG106
    def _draft_extend_on_plan_stream(self, batch: ScheduleBatch, batch_result, kv_loc_plan=None):
        forward_batch, select_index = self._init_draft_extend_batch(
            batch, batch_result, kv_loc_plan
        )
        if forward_batch.forward_mode.is_idle():
            return self._run_idle_draft_extend(forward_batch, batch_result)
        if self.preplans_draft_extend:
            with self.plan_stream_ctx:
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            if self.plan_stream:
                torch.get_device_module(self.device).current_stream().wait_stream(
                    self.plan_stream
                )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._publish_draft_extend(batch_result, logits_output, select_index)


class DpAwareEagleDraftWorker(ForkEagleDraftWorker):
    """Pre-plans the eager multi-step draft only when no MLP-sync padding runs."""

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (pre-plan only where no DP attention / MLP sync pads the batch)
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
            if draft_probs is not None:
                draft_probs = draft_probs.clone()
        else:
            multi_step = (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            )
            if multi_step and forward_batch.global_num_tokens_cpu is not None:
                # MLP-sync padding would reshape the batch after a pre-plan of
                # the step backends; the fork runs eager multi-step drafts only
                # without DP attention.
                raise RuntimeError(
                    "eager multi-step draft under DP attention is unsupported; "
                    "raise --cuda-graph-max-bs so the draft graph covers the batch"
                )
            if multi_step:
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
