"""Draft-extend paths (after target prefill / after verify) for the fork.

The upstream worker fuses batch construction and planning inside
``prepare_for_draft_extend``; the fork keeps that helper for the decode path
and builds its own batch for prefill so that it can swap hidden-state capture.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft_extend
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker
from sglang.srt.utils.common import is_npu
from sglang.srt.utils.common import fast_topk

from blindsg14.spec.plan_utils import unseal


def _select_last_accepted(accept_lens: torch.Tensor, width: int) -> torch.Tensor:
    bs = accept_lens.shape[0]
    base = torch.arange(0, bs * width, width, device=accept_lens.device)
    return base + accept_lens - 1


class ForkEagleDraftExtendWorker(EagleDraftWorker):
    """Draft-extend variants used by the fork's scheduler hooks."""

    def _extend_input(self, batch_result) -> EagleDraftExtendInput:
        return EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )

    def _build_extend_batch(
        self, batch: ScheduleBatch, predict: torch.Tensor, extend_input
    ) -> ForwardBatch:
        """Build the DRAFT_EXTEND_V2 batch without planning it."""
        bs = len(batch.seq_lens)
        ndt = self.speculative_num_draft_tokens
        batch.spec_info = extend_input
        batch.input_ids = predict
        batch.prefix_lens = batch.seq_lens_cpu.tolist()
        batch.extend_lens = [ndt] * bs
        batch.extend_num_tokens = bs * ndt
        batch.forward_mode = (
            ForwardMode.IDLE
            if batch.forward_mode.is_idle()
            else ForwardMode.DRAFT_EXTEND_V2
        )
        forward_batch = ForwardBatch.init_new(
            batch, self.draft_runner, capture_hidden_mode=CaptureHiddenMode.FULL
        )
        forward_batch.seq_lens = forward_batch.seq_lens + ndt
        forward_batch.seq_lens_cpu = forward_batch.seq_lens_cpu + ndt
        forward_batch.seq_lens_sum = int(forward_batch.seq_lens_cpu.sum())
        return forward_batch

    def _finish(self, logits_output, select_index: torch.Tensor, batch_result):
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        if logits_output.hidden_states is not None:
            logits_output.hidden_states = logits_output.hidden_states[select_index]
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        nxt = batch_result.next_draft_input
        nxt.topk_p, nxt.topk_index = topk_p, topk_index
        nxt.hidden_states = logits_output.hidden_states

    # expect: SG106
    def draft_extend_after_verify(self, batch: ScheduleBatch, batch_result):
        next_token_ids = batch_result.next_token_ids.to(torch.int64)
        select_index = _select_last_accepted(
            batch_result.accept_lens, self.speculative_num_draft_tokens
        )
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                self._extend_input(batch_result),
                batch,
                next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner,
                self.cuda_graph_runner_for_draft_extend,
                return_hidden_states_before_norm=False,
            )
        graph = self.cuda_graph_runner_for_draft_extend
        if graph is not None and graph.can_run_graph(forward_batch):
            out = graph.execute(forward_batch, select_index)
            return self._finish(out, torch.arange(out.next_token_logits.shape[0]), batch_result)
        out = self.draft_runner.forward(forward_batch).logits_output
        return self._finish(out, select_index, batch_result)

    # expect: clean
    def draft_extend_after_verify_deferred(self, batch: ScheduleBatch, batch_result):
        next_token_ids = batch_result.next_token_ids.to(torch.int64)
        select_index = _select_last_accepted(
            batch_result.accept_lens, self.speculative_num_draft_tokens
        )
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                self._extend_input(batch_result),
                batch,
                next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner,
                self.cuda_graph_runner_for_draft_extend,
                return_hidden_states_before_norm=False,
            )
        graph = self.cuda_graph_runner_for_draft_extend
        if graph is not None and graph.can_run_graph(forward_batch):
            out = graph.execute(forward_batch, select_index)
            return self._finish(out, torch.arange(out.next_token_logits.shape[0]), batch_result)
        # The helper planned the unpadded batch; DP padding happens inside the
        # forward, so drop the pre-plan and let the forward plan post-pad.
        unseal(forward_batch)
        out = self.draft_runner.forward(forward_batch).logits_output
        return self._finish(out, select_index, batch_result)

    # expect: SG106
    def draft_extend_eager_only(self, batch: ScheduleBatch, batch_result):
        """Used when draft-extend graphs are disabled for this model."""
        helper_kwargs = dict(
            num_draft_tokens=self.speculative_num_draft_tokens,
            draft_model_runner=self.draft_runner,
            cuda_graph_runner=None,
            return_hidden_states_before_norm=False,
        )
        forward_batch = prepare_for_draft_extend(
            self._extend_input(batch_result),
            batch,
            batch_result.next_token_ids.to(torch.int64),
            **helper_kwargs,
        )
        out = self.draft_runner.forward(forward_batch).logits_output
        select_index = _select_last_accepted(
            batch_result.accept_lens, self.speculative_num_draft_tokens
        )
        return self._finish(out, select_index, batch_result)

    # expect: SG106
    def draft_extend_platform_gated(self, batch: ScheduleBatch, batch_result):
        forward_batch = self._build_extend_batch(
            batch,
            batch_result.next_token_ids.to(torch.int64),
            self._extend_input(batch_result),
        )
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            # NPU re-inits post-pad in forward_extend; elsewhere keep the plan.
            if not is_npu():
                forward_batch.mark_forward_metadata_ready()
        out = self.draft_runner.forward(forward_batch).logits_output
        select_index = _select_last_accepted(
            batch_result.accept_lens, self.speculative_num_draft_tokens
        )
        return self._finish(out, select_index, batch_result)

    # expect: clean
    def draft_extend_graph_or_unplanned(self, batch: ScheduleBatch, batch_result):
        forward_batch = self._build_extend_batch(
            batch,
            batch_result.next_token_ids.to(torch.int64),
            self._extend_input(batch_result),
        )
        select_index = _select_last_accepted(
            batch_result.accept_lens, self.speculative_num_draft_tokens
        )
        graph = self.cuda_graph_runner_for_draft_extend
        can_run_graph = bool(graph and graph.can_run_graph(forward_batch))
        if can_run_graph:
            # The replay pads its own static buffers and plans on them.
            out = graph.execute(forward_batch, select_index)
            return self._finish(out, torch.arange(out.next_token_logits.shape[0]), batch_result)
        # Eager: no pre-plan at all; the forward plans the padded batch.
        out = self.draft_runner.forward(forward_batch).logits_output
        return self._finish(out, select_index, batch_result)

    # expect: SG106
    def draft_extend_for_prefill_preplanned(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
    ) -> EagleDraftInput:
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=target_hidden_states,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        forward_batch = ForwardBatch.init_new(
            batch, self.draft_runner, capture_hidden_mode=CaptureHiddenMode.LAST
        )
        forward_batch.return_logprob = False
        if not forward_batch.forward_mode.is_idle():
            # Plan on the plan stream while the target finishes sampling.
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

    # expect: clean
    def draft_extend_for_prefill_warm_only(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
    ) -> EagleDraftInput:
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=target_hidden_states,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        forward_batch = ForwardBatch.init_new(
            batch, self.draft_runner, capture_hidden_mode=CaptureHiddenMode.LAST
        )
        forward_batch.return_logprob = False
        if not forward_batch.forward_mode.is_idle():
            # Warm the wrapper's plan cache off the critical path; the batch is
            # left unmarked, so the forward re-plans after DP padding.
            with self.plan_stream_ctx:
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
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


class ForkStandaloneDraftWorker(StandaloneDraftWorker):
    """Standalone (small dense draft model) worker with a pre-planned extend."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The standalone draft shares one FlashInfer backend between the plan
        # stream and the forward; re-planning is not safe across streams.
        self._replan_on_pad = False

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
            hidden_states=None,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            kv_loc_plan=kv_loc_plan,
        )
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=self._replan_on_pad
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        return EagleDraftInput(
            topk_p=topk_p,
            topk_index=topk_index,
            hidden_states=None,
            bonus_tokens=next_token_ids,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )


class ReplanningStandaloneDraftWorker(StandaloneDraftWorker):
    """Variant for single-stream deployments: the forward may re-plan."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._allow_forward_replan = True

    # expect: clean
    def draft_extend_for_prefill_replannable(
        self,
        batch: ScheduleBatch,
        next_token_ids: torch.Tensor,
        kv_loc_plan=None,
    ):
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=None,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            kv_loc_plan=kv_loc_plan,
        )
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=self._allow_forward_replan
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        return EagleDraftInput(
            topk_p=topk_p,
            topk_index=topk_index,
            hidden_states=None,
            bonus_tokens=next_token_ids,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
