"""EAGLE draft worker used by our DP-attention deployments.

Adds an eager multi-step draft (for runs with the draft CUDA graph disabled),
an eager draft extend (logprob requests never replay the draft-extend graph)
and a few small entry points the scheduler mixin calls directly.
"""

from __future__ import annotations

import logging
from typing import List, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_utils import (
    organize_draft_results,
    per_step_draft_out_cache_loc,
)
from sglang.srt.speculative.eagle_worker_common import (
    prepare_for_draft,
    prepare_for_draft_extend,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.common import fast_topk, require_mlp_sync

from blindsg11.runtime.plan_helpers import preplan_if_unsynced

logger = logging.getLogger(__name__)


class DPAwareEagleDraftWorker(EagleDraftWorker):
    def setup_dp_planning(self) -> None:
        # Indirection so the adaptive-steps controller can swap the backend.
        self._plan_draft = lambda fb: self.draft_attn_backend.init_forward_metadata(fb)
        self._eager_select_index: Optional[torch.Tensor] = None

    # ------------------------------------------------------------------
    # Eager multi-step draft
    # ------------------------------------------------------------------
    def _build_draft_batch(self, batch: ScheduleBatch, with_graph: bool = False):
        return prepare_for_draft(
            batch.spec_info,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner if with_graph else None,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
            target_translator=self.target_worker.model_runner.kv_index_translator,
            num_draft_tokens=self.speculative_num_draft_tokens,
        )

    def _step_loop(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
        )
        out_cache_loc = per_step_draft_out_cache_loc(
            forward_batch.out_cache_loc,
            forward_batch.batch_size,
            self.topk,
            self.speculative_num_steps,
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
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            forward_batch.positions.add_(1)
            hidden_states = logits_output.hidden_states
        return organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )

    # expect: SG106
    def draft_eager(self, batch: ScheduleBatch):
        """Draft without the CUDA graph (--disable-cuda-graph, or bs above the
        largest captured bucket)."""
        forward_batch, _, _ = self._build_draft_batch(batch)
        if forward_batch.forward_mode.is_idle():
            return self._draft_forward_idle(forward_batch, forward_batch.spec_info)
        # Plan every step backend once up front; the per-step forwards in the
        # loop reuse it instead of re-planning on each step.
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self._step_loop(forward_batch)

    # expect: clean
    def draft_eager_unsynced(self, batch: ScheduleBatch):
        """Variant for the mixed fleet: only pre-plan when no MLP-sync padding
        can happen inside the runner."""
        forward_batch, _, _ = self._build_draft_batch(batch)
        if forward_batch.forward_mode.is_idle():
            return self._draft_forward_idle(forward_batch, forward_batch.spec_info)
        preplan_if_unsynced(self.draft_attn_backend, forward_batch)
        return self._step_loop(forward_batch)

    # expect: SG106
    def draft_with_graph_fallback(self, batch: ScheduleBatch):
        forward_batch, can_run_graph, _ = self._build_draft_batch(batch, with_graph=True)
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)[:3]
        if forward_batch.forward_mode.is_idle() or self.speculative_num_steps == 1:
            parents, scores_index, tokens, _ = self.draft_forward(forward_batch)
            return parents, scores_index, tokens
        self._plan_draft(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        parents, scores_index, tokens, _ = self.draft_forward(forward_batch)
        return parents, scores_index, tokens

    # expect: clean
    def draft_graph_or_dp_eager(self, batch: ScheduleBatch):
        forward_batch, can_run_graph, _ = self._build_draft_batch(batch, with_graph=True)
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)[:3]
        if require_mlp_sync() or forward_batch.forward_mode.is_idle():
            # DP attention / gathered buffers: the runner pads this batch inside
            # forward, so leave it unmarked and let every step plan the padded
            # shape.
            parents, scores_index, tokens, _ = self.draft_forward(forward_batch)
            return parents, scores_index, tokens
        self._plan_draft(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        parents, scores_index, tokens, _ = self.draft_forward(forward_batch)
        return parents, scores_index, tokens

    # ------------------------------------------------------------------
    # Eager draft extend (logprob requests)
    # ------------------------------------------------------------------
    def _draft_extend_input(self, batch_result) -> EagleDraftExtendInput:
        return EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )

    # expect: SG106
    def draft_extend_eager(self, batch: ScheduleBatch, batch_result):
        forward_batch = prepare_for_draft_extend(
            self._draft_extend_input(batch_result),
            batch,
            batch_result.next_token_ids.to(torch.int64),
            self.speculative_num_draft_tokens,
            self.draft_runner,
            None,  # never replay the draft-extend graph for logprob requests
            return_hidden_states_before_norm=False,
        )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return logits_output

    # expect: clean
    def draft_extend_eager_replannable(self, batch: ScheduleBatch, batch_result):
        forward_batch = prepare_for_draft_extend(
            self._draft_extend_input(batch_result),
            batch,
            batch_result.next_token_ids.to(torch.int64),
            self.speculative_num_draft_tokens,
            self.draft_runner,
            None,
            return_hidden_states_before_norm=False,
        )
        # prepare_for_draft_extend planned on the draft runner's own backend,
        # so a post-pad re-plan by the same runner is equivalent: opt in.
        if forward_batch.forward_metadata_ready:
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_graph_only(self, batch: ScheduleBatch, batch_result, select_index):
        """Fast path used when the scheduler already knows the batch fits a
        captured draft-extend bucket."""
        runner = self.cuda_graph_runner_for_draft_extend
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                self._draft_extend_input(batch_result),
                batch,
                batch_result.next_token_ids.to(torch.int64),
                self.speculative_num_draft_tokens,
                self.draft_runner,
                runner,
                return_hidden_states_before_norm=False,
            )
        if not runner.can_run_graph(forward_batch):
            raise RuntimeError("draft_extend_graph_only called with a non-graph batch")
        return runner.execute(forward_batch, select_index)

    # expect: clean
    def draft_idle_round(self, forward_batch: ForwardBatch) -> None:
        """DP attention idle rank: every rank must enter each draft forward."""
        assert forward_batch.forward_mode.is_idle()
        for i in range(self.speculative_num_steps - 1):
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                self.draft_runner.forward(forward_batch)
