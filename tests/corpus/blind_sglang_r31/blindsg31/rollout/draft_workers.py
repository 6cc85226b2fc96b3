"""Rollout-side wrappers around SGLang's spec-v2 EAGLE draft worker.

The trainer needs per-step draft logits (for the draft-distillation loss) and
control over when metadata is planned relative to weight syncs, so the rollout
worker re-drives the draft loop itself instead of calling
``EagleDraftWorker.draft`` / ``_draft_extend_for_decode``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, List, Optional

import torch

from sglang.srt.layers.dp_attention import is_dp_attention_enabled
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import (
    prepare_for_draft,
    prepare_for_draft_extend,
)
from sglang.srt.speculative.spec_utils import select_top_k_tokens

from blindsg31.rollout.batch_ops import runner_can_replay
from blindsg31.rollout.modes import StepConfig

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

logger = logging.getLogger(__name__)


class RolloutDraftWorker:
    """Drives an ``EagleDraftWorker``'s draft runner step by step."""

    def __init__(self, eagle_worker: "EagleDraftWorker", config: StepConfig):
        self.eagle_worker = eagle_worker
        self.config = config
        self.draft_runner = eagle_worker.draft_runner
        self.draft_attn_backend = eagle_worker.draft_attn_backend
        self.target_runner = eagle_worker.target_worker.model_runner
        self.req_to_token_pool = eagle_worker.req_to_token_pool
        self.topk = eagle_worker.topk
        self.num_steps = eagle_worker.speculative_num_steps
        self.num_draft_tokens = eagle_worker.speculative_num_draft_tokens
        self.step_logits: List[torch.Tensor] = []

    def _draft_batch(self, batch: "ScheduleBatch"):
        forward_batch, can_run_graph, _ = prepare_for_draft(
            batch.spec_info,
            self.req_to_token_pool,
            batch,
            self.eagle_worker.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.num_steps,
        )
        return forward_batch, can_run_graph

    def _run_steps(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        topk_p, topk_index = spec_info.topk_p, spec_info.topk_index
        hidden_states = spec_info.hidden_states
        scores = None
        for i in range(self.num_steps):
            input_ids, hidden_states, scores, _ = select_top_k_tokens(
                i, topk_p, topk_index, hidden_states, scores, self.topk
            )
            if i == self.num_steps - 1:
                break
            forward_batch.input_ids = input_ids
            spec_info.hidden_states = hidden_states
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                out = self.draft_runner.forward(forward_batch).logits_output
            self.step_logits.append(out.next_token_logits)
            topk_p, topk_index = torch.topk(
                torch.softmax(out.next_token_logits, dim=-1), self.topk, dim=-1
            )
            hidden_states = out.hidden_states
            forward_batch.positions.add_(1)
        return self.step_logits

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft (eager branch); multi-step backend init_forward_metadata + mark, then draft_runner.forward per step
    # expect: SG106
    def multi_step_draft(self, batch: "ScheduleBatch"):
        self.step_logits = []
        forward_batch, can_run_graph = self._draft_batch(batch)
        if can_run_graph:
            return self.eagle_worker.cuda_graph_runner.execute(forward_batch)
        if not forward_batch.forward_mode.is_idle() and self.num_steps > 1:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self._run_steps(forward_batch)

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft (eager branch); same loop, mark declares the post-pad re-plan equivalent
    # expect: clean
    def single_backend_draft(self, batch: "ScheduleBatch"):
        # Used with --speculative-draft-attention-backend set to a single-step
        # backend: the forward's own plan uses the same backend object.
        self.step_logits = []
        forward_batch, can_run_graph = self._draft_batch(batch)
        if can_run_graph:
            return self.eagle_worker.cuda_graph_runner.execute(forward_batch)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self._run_steps(forward_batch)

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode; prepare_for_draft_extend (plans + marks pre-pad) then draft_runner.forward
    # expect: SG106
    def draft_extend_after_verify(self, batch: "ScheduleBatch", batch_result):
        next_token_ids = batch_result.next_token_ids.to(torch.int64)
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.num_draft_tokens,
            num_tokens_for_logprob_per_req=self.num_draft_tokens,
        )
        forward_batch = prepare_for_draft_extend(
            draft_extend_input,
            batch,
            next_token_ids,
            self.num_draft_tokens,
            self.draft_runner,
            None,  # rollout never replays the draft-extend graph
            return_hidden_states_before_norm=False,
        )
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode; prepare_for_draft_extend, then re-mark with replan_equivalent=True before the forward
    # expect: clean
    def draft_extend_after_verify_replan(self, batch: "ScheduleBatch", batch_result):
        next_token_ids = batch_result.next_token_ids.to(torch.int64)
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.num_draft_tokens,
            num_tokens_for_logprob_per_req=self.num_draft_tokens,
        )
        forward_batch = prepare_for_draft_extend(
            draft_extend_input,
            batch,
            next_token_ids,
            self.num_draft_tokens,
            self.draft_runner,
            None,
            return_hidden_states_before_norm=False,
        )
        if not forward_batch.forward_mode.is_idle():
            # Non-DSA draft (plain MLA): the forward path's own plan is the
            # same backend call, so let it re-plan a DP-padded batch.
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill; EXTEND-mode draft batch planned and marked, then draft_runner.forward
    # expect: SG106
    def draft_extend_for_prompt(
        self,
        batch: "ScheduleBatch",
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
    ):
        batch.spec_info.hidden_states = target_hidden_states
        batch.input_ids = next_token_ids
        batch.forward_mode = (
            ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.EXTEND
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
        )
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: speculative/eagle_worker_common.py run_eagle_verify; eager TARGET_VERIFY batch planned + marked, then target forward
    # expect: clean
    def score_verify_tree(self, verify_forward_batch: ForwardBatch):
        assert verify_forward_batch.forward_mode.is_target_verify()
        if not runner_can_replay(self.target_runner, verify_forward_batch):
            self.target_runner.attn_backend.init_forward_metadata(
                verify_forward_batch
            )
            verify_forward_batch.mark_forward_metadata_ready()
        out = self.target_runner.forward(verify_forward_batch)
        return out.logits_output.next_token_logits


class GuardedRolloutDraftWorker(RolloutDraftWorker):
    """Variant deployed on the single-DP-rank rollout fleet."""

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft (eager branch); refuses DP attention before pre-planning the multi-step draft
    # expect: clean
    def multi_step_draft(self, batch: "ScheduleBatch"):
        if is_dp_attention_enabled():
            raise NotImplementedError(
                "GuardedRolloutDraftWorker pre-plans draft metadata and cannot "
                "run under DP attention (the forward would pad a planned batch)"
            )
        self.step_logits = []
        forward_batch, can_run_graph = self._draft_batch(batch)
        if can_run_graph:
            return self.eagle_worker.cuda_graph_runner.execute(forward_batch)
        if not forward_batch.forward_mode.is_idle() and self.num_steps > 1:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self._run_steps(forward_batch)


class WarmPlanRolloutDraftWorker(RolloutDraftWorker):
    """Plans once to warm the per-step wrappers, leaves planning to forward."""

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft (eager branch); init_forward_metadata without the mark, forward plans after padding
    # expect: clean
    def multi_step_draft(self, batch: "ScheduleBatch"):
        self.step_logits = []
        forward_batch, can_run_graph = self._draft_batch(batch)
        if can_run_graph:
            return self.eagle_worker.cuda_graph_runner.execute(forward_batch)
        if not forward_batch.forward_mode.is_idle() and self.num_steps > 1:
            # JIT-warm the per-step FlashInfer wrappers; not a plan record.
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        return self._run_steps(forward_batch)
