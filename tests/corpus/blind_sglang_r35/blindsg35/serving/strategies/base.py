"""Shared plumbing for the storefront draft strategies (unlabelled)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, List, Optional, Tuple

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_utils import (
    organize_draft_results,
    per_step_draft_out_cache_loc,
)
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils import fast_topk

from blindsg35.serving._plan import build_draft_extend_batch, draft_extend_select_index
from blindsg35.serving.config import SpecServingConfig
from blindsg35.serving.state import DraftExtendResult

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.scheduler import GenerationBatchResult
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

logger = logging.getLogger(__name__)


class BaseDraftStrategy:
    name = "base"

    def __init__(self, worker: "EagleDraftWorker", cfg: SpecServingConfig):
        self.worker = worker
        self.cfg = cfg
        self.device = worker.device
        self.draft_runner = worker.draft_runner
        self.draft_attn_backend = worker.draft_attn_backend
        self.draft_extend_attn_backend = worker.draft_extend_attn_backend
        self.cuda_graph_runner = worker.cuda_graph_runner
        self.cuda_graph_runner_for_draft_extend = (
            worker.cuda_graph_runner_for_draft_extend
        )
        self.req_to_token_pool = worker.req_to_token_pool
        self.topk = worker.topk
        self.speculative_num_steps = worker.speculative_num_steps
        self.speculative_num_draft_tokens = worker.speculative_num_draft_tokens
        self.plan_stream = worker.plan_stream
        self.plan_stream_ctx = worker.plan_stream_ctx

    # ------------------------------------------------------------------
    # Draft decode: the while loop over draft steps.  Each step runs the
    # draft model through ModelRunner.forward under the per-step backend.
    # ------------------------------------------------------------------
    def _forward_draft_steps(
        self, forward_batch: ForwardBatch
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        spec_info: EagleDraftInput = forward_batch.spec_info
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
        step = 0
        while True:
            input_ids, hidden_states, scores, tree_info = select_top_k_tokens(
                step, topk_p, topk_index, hidden_states, scores, self.topk
            )
            score_list.append(tree_info[0])
            token_list.append(tree_info[1])
            parents_list.append(tree_info[2])
            if step == self.speculative_num_steps - 1:
                break
            forward_batch.input_ids = input_ids
            forward_batch.out_cache_loc = out_cache_loc[step]
            spec_info.hidden_states = hidden_states
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[step]),
                forward_batch=forward_batch,
            ):
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            hidden_states = logits_output.hidden_states
            forward_batch.positions.add_(1)
            step += 1
        return organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )

    def _run_draft_graph(self, forward_batch: ForwardBatch):
        parent_list, top_scores_index, draft_tokens, _ = self.cuda_graph_runner.execute(
            forward_batch
        )
        return parent_list, top_scores_index, draft_tokens

    # ------------------------------------------------------------------
    # Draft extend after verify (DRAFT_EXTEND_V2), built without planning.
    # ------------------------------------------------------------------
    def _build_extend_batch(
        self, batch: "ScheduleBatch", batch_result: "GenerationBatchResult"
    ) -> Tuple[ForwardBatch, torch.Tensor]:
        select_index = draft_extend_select_index(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        forward_batch = build_draft_extend_batch(
            draft_extend_input,
            batch,
            batch_result.next_token_ids.to(torch.int64),
            self.speculative_num_draft_tokens,
            self.draft_runner,
        )
        return forward_batch, select_index

    def _run_extend_forward(
        self, forward_batch: ForwardBatch, select_index: Optional[torch.Tensor]
    ) -> DraftExtendResult:
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        logits = logits_output.next_token_logits
        hidden = logits_output.hidden_states
        if select_index is not None:
            logits = logits[select_index]
            hidden = hidden[select_index] if hidden is not None else None
        topk_p, topk_index = fast_topk(torch.softmax(logits, dim=-1), self.topk, dim=-1)
        return DraftExtendResult(logits, hidden, topk_p, topk_index)

    def _prepare_extend_step(self, forward_batch: ForwardBatch) -> ForwardBatch:
        return forward_batch

    def run_draft_extend(
        self, batch: "ScheduleBatch", batch_result: "GenerationBatchResult"
    ) -> DraftExtendResult:
        forward_batch, select_index = self._build_extend_batch(batch, batch_result)
        forward_batch = self._prepare_extend_step(forward_batch)
        return self._run_extend_forward(forward_batch, select_index)
