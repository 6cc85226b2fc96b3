"""Standalone MTP draft worker.

Runs a DeepSeek-style MTP head as the draft model of the spec-v2 (overlap)
pipeline: ``draft`` proposes a chain/tree for the target's verify, and the
two ``draft_extend_for_*`` entry points refill the draft KV cache after the
target's prefill / verify.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

import torch

from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_utils import (
    default_tree_mask_mode,
    organize_draft_results,
)
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
    prepare_for_draft_extend,
)
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.common import fast_topk

from blindsg32.common.settings import MTPDraftSettings
from blindsg32.common.shapes import DraftShape
from blindsg32.mtp.contexts import draft_backend_scope, plan_stream_scope
from blindsg32.mtp.plan_utils import plan_and_mark, refresh_seq_lens_sum

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


class StandaloneMTPDraftWorker:
    """Draft side of the MTP spec-v2 worker (one MTP layer, shared lm_head)."""

    def __init__(
        self,
        settings: MTPDraftSettings,
        draft_runner: "ModelRunner",
        target_worker: Any,
        draft_attn_backend: Any,
        cuda_graph_runner: Optional[Any] = None,
        cuda_graph_runner_for_draft_extend: Optional[Any] = None,
        plan_stream: Optional[Any] = None,
    ):
        self.settings = settings
        self.shape: DraftShape = settings.shape
        self.topk = settings.topk
        self.num_steps = settings.num_steps
        self.num_draft_tokens = settings.num_draft_tokens
        self.draft_runner = draft_runner
        self.target_worker = target_worker
        self.draft_attn_backend = draft_attn_backend
        self.cuda_graph_runner = cuda_graph_runner
        self.cuda_graph_runner_for_draft_extend = cuda_graph_runner_for_draft_extend
        self.plan_stream = plan_stream if settings.use_plan_stream else None
        self.req_to_token_pool = draft_runner.req_to_token_pool
        self.device = draft_runner.device
        self._replan_after_pad = settings.replan_after_pad
        self.tree_mask_mode = default_tree_mask_mode()
        # One pre-plan step per chain position; bound once so the hot loop
        # does not rebuild the closure.
        self._plan_step = functools.partial(plan_and_mark, draft_runner.attn_backend)
        self.step_stats: dict = {}

    # ------------------------------------------------------------------
    # Alternative constructors
    # ------------------------------------------------------------------
    @classmethod
    def from_server_args(
        cls, server_args: Any, draft_runner: Any, target_worker: Any, **kwargs: Any
    ) -> "StandaloneMTPDraftWorker":
        settings = MTPDraftSettings.from_server_args(server_args)
        return cls(settings, draft_runner, target_worker, **kwargs)

    @classmethod
    def for_chain(
        cls, num_steps: int, draft_runner: Any, target_worker: Any, **kwargs: Any
    ) -> "StandaloneMTPDraftWorker":
        settings = MTPDraftSettings(
            num_steps=num_steps, topk=1, num_draft_tokens=num_steps + 1
        ).with_env()
        return cls(settings, draft_runner, target_worker, **kwargs)

    # ------------------------------------------------------------------
    # Small helpers
    # ------------------------------------------------------------------
    @staticmethod
    def _per_step_out_cache_loc(
        out_cache_loc: torch.Tensor, bs: int, topk: int, num_steps: int
    ) -> torch.Tensor:
        return out_cache_loc.reshape(bs, topk, num_steps).permute(2, 0, 1).reshape(
            num_steps, -1
        )

    @staticmethod
    def _select_index(accept_lens: torch.Tensor, width: int) -> torch.Tensor:
        bs = accept_lens.shape[0]
        return (
            torch.arange(bs, device=accept_lens.device) * width + accept_lens - 1
        )

    def _plan_for_forward(self, backend: Any, forward_batch: ForwardBatch) -> None:
        """Plan ``forward_batch`` on ``backend`` and mark it planned."""
        refresh_seq_lens_sum(forward_batch)
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    def _topk_from_logits(self, logits: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        probs = torch.softmax(logits, dim=-1)
        return fast_topk(probs, self.topk, dim=-1)

    # ------------------------------------------------------------------
    # Draft decode
    # ------------------------------------------------------------------
    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; non-graph branch plans the multi-step draft backend, marks the batch, then draft_forward runs the draft runner
    # expect: SG106
    def draft(self, batch: "ScheduleBatch"):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_cuda_graph, kv_loc_plan = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.num_steps,
            target_translator=self.target_worker.model_runner.kv_index_translator,
            num_draft_tokens=self.num_draft_tokens,
        )
        if can_run_cuda_graph:
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.cuda_graph_runner.execute(forward_batch)
            )
        else:
            if not forward_batch.forward_mode.is_idle() and self.num_steps > 1:
                # One plan covers every chain step (the multi-step backend
                # holds a wrapper per step).
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
            num_steps=self.num_steps,
            num_draft_tokens=self.num_draft_tokens,
            tree_mask_mode=self.tree_mask_mode,
            device=self.device,
        )
        if kv_loc_plan is not None:
            verify_input.kv_loc_plan = kv_loc_plan
        return verify_input

    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info: EagleDraftInput = forward_batch.spec_info
        if forward_batch.forward_mode.is_idle():
            for i in range(self.num_steps - 1):
                with draft_backend_scope(
                    self.draft_attn_backend.attn_backends[i], forward_batch
                ):
                    self.draft_runner.forward(forward_batch)
            return None, None, None, None

        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
        )
        out_cache_loc = self._per_step_out_cache_loc(
            forward_batch.out_cache_loc,
            forward_batch.batch_size,
            self.topk,
            self.num_steps,
        )
        score_list: List[torch.Tensor] = []
        token_list: List[torch.Tensor] = []
        parents_list: List[torch.Tensor] = []
        scores = None
        for i in range(self.num_steps):
            input_ids, hidden_states, scores, tree_info = select_top_k_tokens(
                i, topk_p, topk_index, hidden_states, scores, self.topk
            )
            score_list.append(tree_info[0])
            token_list.append(tree_info[1])
            parents_list.append(tree_info[2])
            if i == self.num_steps - 1:
                break
            forward_batch.input_ids = input_ids
            forward_batch.out_cache_loc = out_cache_loc[i]
            spec_info.hidden_states = hidden_states
            with draft_backend_scope(
                self.draft_attn_backend.attn_backends[i], forward_batch
            ):
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            topk_p, topk_index = self._topk_from_logits(
                logits_output.next_token_logits
            )
            forward_batch.positions.add_(1)
            hidden_states = logits_output.hidden_states

        parent_list, top_scores_index, draft_tokens = organize_draft_results(
            score_list, token_list, parents_list, self.num_draft_tokens
        )
        return parent_list, top_scores_index, draft_tokens, None

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill; builds the EXTEND batch for the MTP head and lets ModelRunner.forward plan it
    # expect: clean
    def draft_extend_for_prefill(
        self,
        batch: "ScheduleBatch",
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
    ) -> EagleDraftInput:
        if not batch.forward_mode.is_idle():
            rotated = torch.empty_like(batch.input_ids)
            pt = 0
            for i, extend_len in enumerate(batch.extend_lens):
                chunk = batch.input_ids[pt : pt + extend_len]
                rotated[pt : pt + extend_len - 1] = chunk[1:]
                rotated[pt + extend_len - 1] = next_token_ids[i]
                pt += extend_len
            batch.input_ids = rotated
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
        # No pre-plan: the runner plans after its DP/MLP-sync padding.
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        topk_p, topk_index = self._topk_from_logits(logits_output.next_token_logits)
        return EagleDraftInput(
            topk_p=topk_p,
            topk_index=topk_index,
            hidden_states=logits_output.hidden_states,
            bonus_tokens=next_token_ids,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode; prepare_for_draft_extend plans+marks the DRAFT_EXTEND_V2 batch, eager branch runs draft_runner.forward
    # expect: SG106
    def draft_extend_for_decode(
        self, batch: "ScheduleBatch", batch_result: "GenerationBatchResult"
    ) -> None:
        accept_lens = batch_result.accept_lens
        next_token_ids = batch_result.next_token_ids.to(torch.int64)
        select_index = self._select_index(accept_lens, self.num_draft_tokens)
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=accept_lens - 1,
            num_accept_tokens=accept_lens,
            num_tokens_per_req=self.num_draft_tokens,
            num_tokens_for_logprob_per_req=self.num_draft_tokens,
        )
        with plan_stream_scope(self.plan_stream, self.device):
            forward_batch = prepare_for_draft_extend(
                draft_extend_input,
                batch,
                next_token_ids,
                self.num_draft_tokens,
                self.draft_runner,
                self.cuda_graph_runner_for_draft_extend,
                return_hidden_states_before_norm=False,
            )
        graph = self.cuda_graph_runner_for_draft_extend
        if graph is not None and graph.can_run_graph(forward_batch):
            logits_output = graph.execute(forward_batch, select_index)
        else:
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            logits_output.next_token_logits = logits_output.next_token_logits[
                select_index
            ]
            logits_output.hidden_states = logits_output.hidden_states[select_index]
        topk_p, topk_index = self._topk_from_logits(logits_output.next_token_logits)
        nxt = batch_result.next_draft_input
        nxt.topk_p, nxt.topk_index, nxt.hidden_states = (
            topk_p,
            topk_index,
            logits_output.hidden_states,
        )

    # idiom: speculative/eagle_worker_v2.py (0.5.6 form) draft_forward with skip_attn_backend_init=True; plans the seed decode step, then forwards with the deprecated skip flag
    # expect: SG106
    def _run_bonus_seed(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        forward_batch.input_ids = spec_info.bonus_tokens
        backend = self.draft_runner.attn_backend
        refresh_seq_lens_sum(forward_batch)
        backend.init_forward_metadata(forward_batch)
        with draft_backend_scope(backend, forward_batch):
            output = self.draft_runner.forward(
                forward_batch, skip_attn_backend_init=True
            )
        return output.logits_output

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; warms the draft backend plan (no mark) before the forward, so the runner plans again after padding
    # expect: clean
    def _prime_and_forward(self, forward_batch: ForwardBatch):
        backend = self.draft_runner.attn_backend
        if not forward_batch.forward_mode.is_idle():
            # Warm the wrapper's plan cache; the runner owns the real plan.
            backend.init_forward_metadata(forward_batch)
        with draft_backend_scope(backend, forward_batch):
            output = self.draft_runner.forward(forward_batch)
        return output.logits_output

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft_forward; one chain step planned by a functools.partial-bound plan_and_mark, then the draft runner forward
    # expect: SG106
    def _draft_chain_step(self, forward_batch: ForwardBatch, step: int):
        out_cache_loc = self._per_step_out_cache_loc(
            forward_batch.out_cache_loc,
            forward_batch.batch_size,
            self.topk,
            self.num_steps,
        )
        forward_batch.out_cache_loc = out_cache_loc[step]
        self._plan_step(forward_batch)
        with draft_backend_scope(self.draft_runner.attn_backend, forward_batch):
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        forward_batch.positions.add_(1)
        return self._topk_from_logits(logits_output.next_token_logits)

    # idiom: model_executor/forward_batch_info.py mark_forward_metadata_ready(replan_equivalent=True); draft extend planned on the runner's own backend, forward re-plans if DP padding reshaped it
    # expect: clean
    def draft_extend_step(self, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_draft_extend_v2()
        plan_and_mark(
            self.draft_runner.attn_backend, forward_batch, replan_equivalent=True
        )
        output = self.draft_runner.forward(forward_batch)
        return output.logits_output

    # idiom: speculative/eagle_utils.py eagle_prepare_for_verify; target-verify batch planned and marked via the inherited helper, target runner forwards (eager verify always re-plans)
    # expect: clean
    def verify_fallback(self, verify_forward_batch: ForwardBatch):
        if not verify_forward_batch.forward_mode.is_target_verify():
            raise ValueError("verify_fallback only handles TARGET_VERIFY batches")
        target_runner = self.target_worker.model_runner
        self._plan_for_forward(target_runner.attn_backend, verify_forward_batch)
        output = target_runner.forward(verify_forward_batch)
        return output.logits_output
