"""Variants of the standalone MTP draft worker.

* ``DeepSeekMTPDraftWorker``: DeepSeek-V3/R1 MTP head (DSA-indexer aware).
* ``DpRefusingMTPDraftWorker``: the low-latency single-replica deployment,
  which refuses DP attention at construction.
* ``PlanStreamMTPDraftWorker``: plans draft batches on a side stream to
  overlap with the target's sampling.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_worker_common import (
    prepare_for_draft,
    prepare_for_draft_extend,
)
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
from sglang.srt.utils.common import require_mlp_sync

from blindsg32.mtp.contexts import draft_backend_scope, plan_stream_scope
from blindsg32.mtp.plan_utils import forward_will_pad, plan_and_mark, refresh_seq_lens_sum
from blindsg32.mtp.standalone_mtp_worker import StandaloneMTPDraftWorker

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.utils import GenerationBatchResult

logger = logging.getLogger(__name__)


class DeepSeekMTPDraftWorker(StandaloneMTPDraftWorker):
    """MTP draft worker for DeepSeek-V3-style NextN heads."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        hf_config = self.draft_runner.model_config.hf_config
        self.has_dsa_indexer = getattr(hf_config, "index_topk", None) is not None
        self._plan_step_replan = functools.partial(
            plan_and_mark, self.draft_runner.attn_backend, replan_equivalent=True
        )

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (DSA note, #27091); subclass override keeps the pre-pad plan with a plain mark before draft_runner.forward
    # expect: SG106
    def draft_extend_step(self, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_draft_extend_v2()
        backend = self.draft_runner.attn_backend
        backend.init_forward_metadata(forward_batch)
        # The DSA indexer cannot rebuild its schedule on a DP-padded batch,
        # so keep the pre-pad plan as-is.
        forward_batch.mark_forward_metadata_ready()
        output = self.draft_runner.forward(forward_batch)
        return output.logits_output

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode; after prepare_for_draft_extend the batch is re-marked replan_equivalent=True so the forward re-plans post-pad
    # expect: clean
    def draft_extend_for_decode(
        self, batch: "ScheduleBatch", batch_result: "GenerationBatchResult"
    ) -> None:
        accept_lens = batch_result.accept_lens
        select_index = self._select_index(accept_lens, self.num_draft_tokens)
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=accept_lens - 1,
            num_accept_tokens=accept_lens,
            num_tokens_per_req=self.num_draft_tokens,
            num_tokens_for_logprob_per_req=self.num_draft_tokens,
        )
        forward_batch = prepare_for_draft_extend(
            draft_extend_input,
            batch,
            batch_result.next_token_ids.to(torch.int64),
            self.num_draft_tokens,
            self.draft_runner,
            None,
            return_hidden_states_before_norm=False,
        )
        if not forward_batch.forward_mode.is_idle():
            # The NextN head here has no DSA indexer, so the runner's own plan
            # is equivalent: let it re-plan if DP padding reshapes the batch.
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        logits = logits_output.next_token_logits[select_index]
        topk_p, topk_index = self._topk_from_logits(logits)
        nxt = batch_result.next_draft_input
        nxt.topk_p, nxt.topk_index = topk_p, topk_index
        nxt.hidden_states = logits_output.hidden_states[select_index]

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode; refill after accept planned through the inherited _plan_for_forward (plain mark), then draft_runner.forward
    # expect: SG106
    def _refill_after_accept(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        self._plan_for_forward(self.draft_runner.attn_backend, forward_batch)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        return logits_output

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; pre-plans but marks only when the batch carries no DP token counts (the forward will not pad it)
    # expect: clean
    def draft(self, batch: "ScheduleBatch"):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_cuda_graph, _ = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.num_steps,
        )
        if can_run_cuda_graph:
            return self.cuda_graph_runner.execute(forward_batch)
        if not forward_batch.forward_mode.is_idle() and self.num_steps > 1:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            if not forward_will_pad(forward_batch):
                forward_batch.mark_forward_metadata_ready()
        return self.draft_forward(forward_batch)

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill; override pre-plans the EXTEND batch to overlap with sampling and marks it before draft_runner.forward
    # expect: SG106
    def draft_extend_for_prefill(
        self,
        batch: "ScheduleBatch",
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
    ) -> EagleDraftInput:
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
        if not forward_batch.forward_mode.is_idle():
            with plan_stream_scope(self.plan_stream, self.device):
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
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

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft_forward; chain step planned through a partial bound with replan_equivalent=True, then the draft runner forward
    # expect: clean
    def _draft_chain_step(self, forward_batch: ForwardBatch, step: int):
        out_cache_loc = self._per_step_out_cache_loc(
            forward_batch.out_cache_loc,
            forward_batch.batch_size,
            self.topk,
            self.num_steps,
        )
        forward_batch.out_cache_loc = out_cache_loc[step]
        self._plan_step_replan(forward_batch)
        with draft_backend_scope(self.draft_runner.attn_backend, forward_batch):
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        forward_batch.positions.add_(1)
        return self._topk_from_logits(logits_output.next_token_logits)


class DpRefusingMTPDraftWorker(StandaloneMTPDraftWorker):
    """Single-replica low-latency deployment: no DP attention, no MLP sync."""

    def __init__(self, *args: Any, **kwargs: Any):
        if get_parallel().attn_dp_enabled or require_mlp_sync():
            raise ValueError(
                "DpRefusingMTPDraftWorker does not support DP attention / MLP sync; "
                "use DeepSeekMTPDraftWorker instead"
            )
        super().__init__(*args, **kwargs)

    # idiom: speculative/eagle_worker_v2.py draft_forward seed step; plan, mark, forward on a worker whose constructor refuses DP attention
    # expect: clean
    def _run_bonus_seed(self, forward_batch: ForwardBatch):
        forward_batch.input_ids = forward_batch.spec_info.bonus_tokens
        backend = self.draft_runner.attn_backend
        refresh_seq_lens_sum(forward_batch)
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        with draft_backend_scope(backend, forward_batch):
            output = self.draft_runner.forward(forward_batch)
        return output.logits_output


class PlanStreamMTPDraftWorker(StandaloneMTPDraftWorker):
    """Plans draft-extend batches on ``plan_stream``."""

    # idiom: speculative/eagle_worker_v2.py _draft_extend_for_decode (plan_stream_ctx); plans on the plan stream, marks with replan_equivalent taken from the env-flag setting (default off)
    # expect: SG106
    def draft_extend_for_decode(
        self, batch: "ScheduleBatch", batch_result: "GenerationBatchResult"
    ) -> None:
        accept_lens = batch_result.accept_lens
        select_index = self._select_index(accept_lens, self.num_draft_tokens)
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=accept_lens - 1,
            num_accept_tokens=accept_lens,
            num_tokens_per_req=self.num_draft_tokens,
            num_tokens_for_logprob_per_req=self.num_draft_tokens,
        )
        batch.input_ids = batch_result.next_token_ids.to(torch.int64)
        batch.forward_mode = (
            ForwardMode.IDLE
            if batch.forward_mode.is_idle()
            else ForwardMode.DRAFT_EXTEND_V2
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )
        forward_batch.seq_lens = forward_batch.seq_lens + self.num_draft_tokens
        if not forward_batch.forward_mode.is_idle():
            with plan_stream_scope(self.plan_stream, self.device):
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=self._replan_after_pad
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        topk_p, topk_index = self._topk_from_logits(
            logits_output.next_token_logits[select_index]
        )
        nxt = batch_result.next_draft_input
        nxt.topk_p, nxt.topk_index = topk_p, topk_index
        nxt.hidden_states = logits_output.hidden_states[select_index]

    # idiom: model_executor/forward_batch_info.py apply_deprecated_skip_attn_backend_init; marks replan_equivalent=True, then forwards with skip_attn_backend_init=True, which re-marks without replan
    # expect: SG106
    def _run_bonus_seed(self, forward_batch: ForwardBatch):
        forward_batch.input_ids = forward_batch.spec_info.bonus_tokens
        backend = self.draft_runner.attn_backend
        refresh_seq_lens_sum(forward_batch)
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        with draft_backend_scope(backend, forward_batch):
            output = self.draft_runner.forward(
                forward_batch, skip_attn_backend_init=True
            )
        return output.logits_output

    # idiom: model_runner.py ModelRunner.forward(skip_attn_backend_init=...) deprecated flag; skip only when MLP sync is off, so DP batches are planned by the forward after padding
    # expect: clean
    def _run_recurrent_seed(self, forward_batch: ForwardBatch, hidden: torch.Tensor):
        forward_batch.spec_info.hidden_states = hidden
        backend = self.draft_runner.attn_backend
        refresh_seq_lens_sum(forward_batch)
        backend.init_forward_metadata(forward_batch)
        with draft_backend_scope(backend, forward_batch):
            output = self.draft_runner.forward(
                forward_batch, skip_attn_backend_init=not require_mlp_sync()
            )
        return output.logits_output
