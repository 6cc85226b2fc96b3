"""Forked EAGLE v2 draft / verify workers.

The draft worker keeps SGLang's multi-step draft loop (``draft_forward``) and
re-arranges how the draft-decode and draft-extend batches get planned.
"""

from __future__ import annotations

import contextlib
from typing import Any, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_utils import eagle_prepare_for_verify
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
    prepare_for_draft_extend,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker, EAGLEWorkerV2
from sglang.srt.utils.common import require_mlp_sync


class DraftPlanMixin:
    """Pre-planning helpers; expects ``draft_attn_backend`` on the host class."""

    def _preplan(self, forward_batch: ForwardBatch) -> ForwardBatch:
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return forward_batch

    def _preplan_single_rank(self, forward_batch: ForwardBatch) -> ForwardBatch:
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        if not require_mlp_sync():
            forward_batch.mark_forward_metadata_ready()
        return forward_batch


class ForkEagleDraftWorker(DraftPlanMixin, EagleDraftWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Options handed to mark_forward_metadata_ready by the step loop.
        self._step_mark_kwargs = {"replan_equivalent": False}
        self._extend_mark_kwargs = {"replan_equivalent": True}

    def _prepare(self, batch: ScheduleBatch):
        return prepare_for_draft(
            batch.spec_info,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )

    def _verify_input(self, batch, draft_input, parent_list, top_idx, tokens, probs):
        return build_eagle_verify_input(
            batch,
            draft_input,
            parent_list,
            top_idx,
            tokens,
            probs,
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
        forward_batch, can_run_graph, _ = self._prepare(batch)
        if can_run_graph:
            results = self.cuda_graph_runner.execute(forward_batch)
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                forward_batch = self._preplan(forward_batch)
            results = self.draft_forward(forward_batch)
        return self._verify_input(batch, draft_input, *results)

    # expect: clean
    def draft_mixin(self, batch: ScheduleBatch):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_graph, _ = self._prepare(batch)
        if can_run_graph:
            results = self.cuda_graph_runner.execute(forward_batch)
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                forward_batch = self._preplan_single_rank(forward_batch)
            results = self.draft_forward(forward_batch)
        return self._verify_input(batch, draft_input, *results)

    # expect: SG106
    def draft_steps_inline(self, batch: ScheduleBatch):
        forward_batch, _, _ = self._prepare(batch)
        spec_info = forward_batch.spec_info
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(**self._step_mark_kwargs)
        topk_index = spec_info.topk_index
        outputs = []
        for i in range(self.speculative_num_steps - 1):
            forward_batch.input_ids = topk_index.flatten()
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            topk_index = torch.argmax(
                logits_output.next_token_logits, dim=-1, keepdim=True
            )
            spec_info.hidden_states = logits_output.hidden_states
            forward_batch.positions.add_(1)
            outputs.append(topk_index)
        return outputs

    # expect: clean
    def draft_extend_step(self, batch: ScheduleBatch, batch_result: Any):
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
            None,
            return_hidden_states_before_norm=False,
        )
        if forward_batch.forward_metadata_ready:
            # Re-record the plan with the extend options.
            forward_batch.mark_forward_metadata_ready(**self._extend_mark_kwargs)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_direct(self, batch: ScheduleBatch, batch_result: Any):
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
                None,
                return_hidden_states_before_norm=False,
            )
        output = self.draft_runner.forward(forward_batch)
        return output.logits_output

    # expect: clean
    def draft_extend_warm(self, batch: ScheduleBatch, predict: torch.Tensor):
        forward_batch = self._draft_extend_batch(batch, predict)
        # Warm the backend's buffers for this shape.
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    def _draft_extend_batch(self, batch: ScheduleBatch, predict: torch.Tensor):
        from blindsg41.common.plan_utils import new_draft_extend_batch

        return new_draft_extend_batch(
            batch, self.draft_runner, predict, self.speculative_num_draft_tokens
        )

    # expect: SG106
    def draft_extend_own_backend(self, batch: ScheduleBatch, predict: torch.Tensor):
        saved_mode = batch.forward_mode
        forward_batch = self._draft_extend_batch(batch, predict)
        backend = self.draft_extend_attn_backend or self.draft_runner.attn_backend
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        try:
            return self.draft_runner.forward(forward_batch).logits_output
        finally:
            batch.forward_mode = saved_mode


class ForkEAGLEWorkerV2(EAGLEWorkerV2):
    """Target-side fork: the verify step plans the target backend itself."""

    # expect: clean
    def verify_preplanned(self, batch: ScheduleBatch):
        verify_forward_batch, can_run_graph = eagle_prepare_for_verify(
            batch.spec_info,
            self.req_to_token_pool,
            batch,
            self.target_worker,
        )
        if not can_run_graph and not verify_forward_batch.forward_mode.is_idle():
            self.target_worker.model_runner.attn_backend.init_forward_metadata(
                verify_forward_batch
            )
            verify_forward_batch.mark_forward_metadata_ready()
        return self.target_worker.forward_batch_generation(
            batch=None, forward_batch=verify_forward_batch, is_verify=True
        )

    # expect: SG106
    def draft_extend_through_worker(self, batch: ScheduleBatch, predict: torch.Tensor):
        dw: ForkEagleDraftWorker = self._draft_worker
        forward_batch = dw._draft_extend_batch(batch, predict)
        dw.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        # Route through the draft TpModelWorker so PP / logging hooks apply.
        result = dw.draft_worker.forward_batch_generation(
            batch=None, forward_batch=forward_batch
        )
        return result.logits_output

    # expect: clean
    def draft_extend_via_tp(self, batch: ScheduleBatch, predict: torch.Tensor):
        dw: ForkEagleDraftWorker = self._draft_worker
        forward_batch = dw._draft_extend_batch(batch, predict)
        if require_mlp_sync():
            raise NotImplementedError(
                "pre-planned draft extend is single-rank only; use the "
                "draft-extend cuda graph under DP attention"
            )
        dw.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return dw.draft_worker.forward_batch_generation(
            batch=None, forward_batch=forward_batch
        ).logits_output
