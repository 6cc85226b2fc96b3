"""Standalone (separate small model) draft worker, eager draft-extend paths.

The standalone draft owns a full ``TpModelWorker``; its draft-extend passes go
through ``TpModelWorker.forward_batch_generation`` so logprob / PP plumbing is
shared with the target.
"""

from __future__ import annotations

import logging
from typing import Sequence

import torch

from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker
from sglang.srt.utils import is_npu
from sglang.srt.utils.common import fast_topk

from blindsg17.spec.plan_policy import draft_extend_select_index

_is_npu = is_npu()

logger = logging.getLogger(__name__)


class SharedWorkerStandaloneDraft(StandaloneDraftWorker):
    def _standalone_extend_batch(
        self, batch: ScheduleBatch, accept_lens: torch.Tensor
    ) -> ForwardBatch:
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=None,
            num_correct_drafts=accept_lens - 1,
            num_accept_tokens=accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        batch.forward_mode = (
            ForwardMode.IDLE
            if batch.forward_mode.is_idle()
            else ForwardMode.DRAFT_EXTEND_V2
        )
        return ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            return_hidden_states_before_norm=False,
        )

    def _extend_backends(self) -> Sequence[AttentionBackend]:
        return (self.draft_runner.attn_backend,)

    def _next_draft_input(self, logits, select_index, next_token_ids):
        probs = torch.softmax(logits[select_index], dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        return EagleDraftInput(
            topk_p=topk_p,
            topk_index=topk_index,
            hidden_states=None,
            bonus_tokens=next_token_ids,
        )

    # expect: SG106
    def _draft_extend_for_decode(self, batch: ScheduleBatch, batch_result):
        forward_batch = self._standalone_extend_batch(batch, batch_result.accept_lens)
        select_index = draft_extend_select_index(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        result = self.draft_worker.forward_batch_generation(
            batch=None,
            forward_batch=forward_batch,
            skip_attn_backend_init=not forward_batch.forward_mode.is_idle(),
        )
        batch_result.next_draft_input = self._next_draft_input(
            result.logits_output.next_token_logits,
            select_index,
            batch_result.next_token_ids,
        )

    # expect: clean
    def draft_extend_for_decode_shared(self, batch: ScheduleBatch, batch_result):
        forward_batch = self._standalone_extend_batch(batch, batch_result.accept_lens)
        select_index = draft_extend_select_index(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        result = self.draft_worker.forward_batch_generation(
            batch=None,
            forward_batch=forward_batch,
            skip_attn_backend_init=(
                None if _is_npu or get_parallel().attn_dp_enabled else True
            ),
        )
        batch_result.next_draft_input = self._next_draft_input(
            result.logits_output.next_token_logits,
            select_index,
            batch_result.next_token_ids,
        )

    # expect: SG106
    def draft_extend_prefill_tail_v2(
        self,
        batch: ScheduleBatch,
        next_token_ids: torch.Tensor,
    ) -> EagleDraftInput:
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=None,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            return_hidden_states_before_norm=False,
        )
        skip_init = False
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            skip_init = True
        out = self.draft_runner.forward(forward_batch, skip_attn_backend_init=skip_init)
        logits = out.logits_output.next_token_logits
        probs = torch.softmax(logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        return EagleDraftInput(
            topk_p=topk_p,
            topk_index=topk_index,
            hidden_states=None,
            bonus_tokens=next_token_ids,
        )

    # expect: clean
    def draft_extend_prefill_tail(
        self,
        batch: ScheduleBatch,
        next_token_ids: torch.Tensor,
    ) -> EagleDraftInput:
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=None,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            return_hidden_states_before_norm=False,
        )
        skip_init = False
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            skip_init = forward_batch.global_num_tokens_cpu is None
        out = self.draft_runner.forward(forward_batch, skip_attn_backend_init=skip_init)
        logits = out.logits_output.next_token_logits
        probs = torch.softmax(logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        return EagleDraftInput(
            topk_p=topk_p,
            topk_index=topk_index,
            hidden_states=None,
            bonus_tokens=next_token_ids,
        )

    # expect: SG106
    def draft_extend_all_backends(self, batch: ScheduleBatch, batch_result):
        forward_batch = self._standalone_extend_batch(batch, batch_result.accept_lens)
        select_index = draft_extend_select_index(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        if not forward_batch.forward_mode.is_idle():
            for backend in self._extend_backends():
                backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._next_draft_input(
            logits_output.next_token_logits, select_index, batch_result.next_token_ids
        )

    # expect: clean
    def draft_extend_all_backends_v2(self, batch: ScheduleBatch, batch_result):
        forward_batch = self._standalone_extend_batch(batch, batch_result.accept_lens)
        select_index = draft_extend_select_index(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        if get_parallel().attn_dp_enabled:
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            return self._next_draft_input(
                logits_output.next_token_logits,
                select_index,
                batch_result.next_token_ids,
            )
        if not forward_batch.forward_mode.is_idle():
            for backend in self._extend_backends():
                backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._next_draft_input(
            logits_output.next_token_logits, select_index, batch_result.next_token_ids
        )
