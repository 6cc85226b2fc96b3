"""Fork of the EAGLE v2 draft worker with plan-stream overlap.

``ForkEagleDraftWorker`` is the first cut; ``ForkEagleDraftWorkerDP`` is the
DP-attention aware variant that replaced it on the DP deployments.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
)
from sglang.srt.speculative.eagle_info import (
    EagleDraftExtendInput,
    EagleDraftInput,
)
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
    prepare_for_draft_extend,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import fast_topk


class ForkEagleDraftWorker(EagleDraftWorker):
    """EAGLE draft worker; draft decode and draft extend run eagerly when no
    CUDA graph fits the batch."""

    @property
    def preplan_backend(self):
        # Draft extend runs on the runner's own (extend) backend.
        return self.draft_runner.attn_backend

    def _build_verify_input(self, batch, draft_input, outs):
        parent_list, top_scores_index, draft_tokens, draft_probs = outs
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

    # expect: SG106
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
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
        if can_run_cuda_graph:
            outs = self.cuda_graph_runner.execute(forward_batch)
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                # Overlap the multi-step plan with the previous verify.
                with self.plan_stream_ctx:
                    self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            outs = self.draft_forward(forward_batch)

        verify_input = self._build_verify_input(batch, draft_input, outs)
        if kv_loc_plan is not None:
            verify_input.kv_loc_plan = kv_loc_plan
            verify_input.prepared_out_cache_loc = kv_loc_plan.write_virtual
        return verify_input

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan=None,
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

        runner = self.cuda_graph_runner_for_draft_extend
        if runner and runner.can_run_graph(forward_batch):
            logits_output = runner.execute(forward_batch, select_index)
        else:
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            logits_output.next_token_logits = logits_output.next_token_logits[
                select_index
            ]
            logits_output.hidden_states = logits_output.hidden_states[select_index]

        topk_p, topk_index = fast_topk(
            torch.softmax(logits_output.next_token_logits, dim=-1), self.topk, dim=-1
        )
        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = topk_p
        next_draft_input.topk_index = topk_index
        next_draft_input.hidden_states = logits_output.hidden_states

    # expect: SG106
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
        kv_loc_plan=None,
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
            with self.plan_stream_ctx:
                self.preplan_backend.init_forward_metadata(forward_batch)
        logits_output = self.draft_runner.forward(
            forward_batch, skip_attn_backend_init=True
        ).logits_output
        topk_p, topk_index = fast_topk(
            torch.softmax(logits_output.next_token_logits, dim=-1), self.topk, dim=-1
        )
        return EagleDraftInput(
            topk_p=topk_p,
            topk_index=topk_index,
            hidden_states=logits_output.hidden_states,
            bonus_tokens=next_token_ids,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )


class ForkEagleDraftWorkerDP(ForkEagleDraftWorker):
    """DP-attention aware variant: nothing planned pre-pad is trusted by a
    forward that pads."""

    # expect: clean
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
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
        if can_run_cuda_graph:
            outs = self.cuda_graph_runner.execute(forward_batch)
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
                and forward_batch.global_num_tokens_cpu is None
            ):
                # Rank-local batch: no DP padding will reshape it.
                with self.plan_stream_ctx:
                    self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            outs = self.draft_forward(forward_batch)

        verify_input = self._build_verify_input(batch, draft_input, outs)
        if kv_loc_plan is not None:
            verify_input.kv_loc_plan = kv_loc_plan
            verify_input.prepared_out_cache_loc = kv_loc_plan.write_virtual
        return verify_input

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan=None,
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

        runner = self.cuda_graph_runner_for_draft_extend
        if runner and runner.can_run_graph(forward_batch):
            logits_output = runner.execute(forward_batch, select_index)
        else:
            if not forward_batch.forward_mode.is_idle():
                # prepare_for_draft_extend planned on draft_runner.attn_backend,
                # the very backend the forward plans on: let the forward
                # re-plan once DP padding has reshaped the batch.
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            logits_output.next_token_logits = logits_output.next_token_logits[
                select_index
            ]
            logits_output.hidden_states = logits_output.hidden_states[select_index]

        topk_p, topk_index = fast_topk(
            torch.softmax(logits_output.next_token_logits, dim=-1), self.topk, dim=-1
        )
        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = topk_p
        next_draft_input.topk_index = topk_index
        next_draft_input.hidden_states = logits_output.hidden_states

    # expect: clean
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
        kv_loc_plan=None,
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
            # Early plan only warms the backend's host buffers; the forward
            # plans again on the final (padded) shape.
            with self.plan_stream_ctx:
                self.preplan_backend.init_forward_metadata(forward_batch)
        logits_output = self.draft_runner.forward(
            forward_batch, skip_attn_backend_init=False
        ).logits_output
        topk_p, topk_index = fast_topk(
            torch.softmax(logits_output.next_token_logits, dim=-1), self.topk, dim=-1
        )
        return EagleDraftInput(
            topk_p=topk_p,
            topk_index=topk_index,
            hidden_states=logits_output.hidden_states,
            bonus_tokens=next_token_ids,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
