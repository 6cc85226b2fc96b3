"""Standalone small-draft-model strategy (no hidden-state hand-off)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.utils import fast_topk, require_mlp_sync

from blindsg35.serving._plan import is_dp_padded
from blindsg35.serving.config import register_strategy
from blindsg35.serving.decorators import retry_forward
from blindsg35.serving.state import DraftExtendResult
from blindsg35.serving.strategies.base import BaseDraftStrategy

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.scheduler import GenerationBatchResult

logger = logging.getLogger(__name__)


def _shift_prefill_input_ids(batch: "ScheduleBatch", next_token_ids: torch.Tensor) -> None:
    """Rotate each request's prefill tokens left by one and append the token
    the target just sampled (the draft predicts one position ahead)."""
    new_input_ids = torch.empty_like(batch.input_ids)
    pt = 0
    for i, extend_len in enumerate(batch.extend_lens):
        input_ids = batch.input_ids[pt : pt + extend_len]
        new_input_ids[pt : pt + extend_len].copy_(
            torch.cat((input_ids[1:], next_token_ids[i].reshape(1)))
        )
        pt += extend_len
    batch.input_ids = new_input_ids


@register_strategy("STANDALONE")
class StandaloneDraftStrategy(BaseDraftStrategy):
    name = "standalone"

    def _extend_result(self, forward_batch: ForwardBatch) -> EagleDraftInput:
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        return EagleDraftInput(
            topk_p=topk_p,
            topk_index=topk_index,
            hidden_states=None,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )

    # ------------------------------------------------------------------
    # Draft extend after verify, planned on the plan stream
    # ------------------------------------------------------------------
    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: SG106
    def draft_extend_after_verify(
        self, batch: "ScheduleBatch", batch_result: "GenerationBatchResult"
    ) -> DraftExtendResult:
        if self.plan_stream:
            self.plan_stream.wait_stream(
                torch.get_device_module(self.device).current_stream()
            )
        with self.plan_stream_ctx:
            forward_batch, select_index = self._build_extend_batch(batch, batch_result)
            if not forward_batch.forward_mode.is_idle():
                # Overlap the plan with the verify tail on the plan stream.
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        return self._run_extend_forward(forward_batch, select_index)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: clean
    def draft_extend_after_verify_deferred(
        self, batch: "ScheduleBatch", batch_result: "GenerationBatchResult"
    ) -> DraftExtendResult:
        if self.plan_stream:
            self.plan_stream.wait_stream(
                torch.get_device_module(self.device).current_stream()
            )
        with self.plan_stream_ctx:
            forward_batch, select_index = self._build_extend_batch(batch, batch_result)
            # A batch the forward will pad is left unmarked: its metadata is
            # planned by the forward after prepare_mlp_sync_batch.
            if not forward_batch.forward_mode.is_idle() and not is_dp_padded(
                forward_batch
            ):
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        return self._run_extend_forward(forward_batch, select_index)

    # ------------------------------------------------------------------
    # Draft extend for prefill (EXTEND)
    # ------------------------------------------------------------------
    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill
    # expect: SG106
    def draft_extend_for_prefill(
        self, batch: "ScheduleBatch", next_token_ids: torch.Tensor
    ) -> EagleDraftInput:
        if not batch.forward_mode.is_idle():
            _shift_prefill_input_ids(batch, next_token_ids)
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
        forward_batch.return_logprob = False
        if not forward_batch.forward_mode.is_idle():
            # Long prompts: plan once here instead of inside the forward.
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self._extend_result(forward_batch)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill
    # expect: clean
    def draft_extend_for_prefill_lazy(
        self, batch: "ScheduleBatch", next_token_ids: torch.Tensor
    ) -> EagleDraftInput:
        if not batch.forward_mode.is_idle():
            _shift_prefill_input_ids(batch, next_token_ids)
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
        forward_batch.return_logprob = False
        # Unmarked: ModelRunner.forward plans it after the DP padding.
        return self._extend_result(forward_batch)

    # ------------------------------------------------------------------
    # Legacy call sites still on the deprecated skip_attn_backend_init kwarg
    # ------------------------------------------------------------------
    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner.forward (skip_attn_backend_init)
    # expect: SG106
    @retry_forward(retries=1)
    def run_extend_legacy(
        self, forward_batch: ForwardBatch, select_index: Optional[torch.Tensor] = None
    ) -> DraftExtendResult:
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        logits_output = self.draft_runner.forward(
            forward_batch, skip_attn_backend_init=True
        ).logits_output
        logits = logits_output.next_token_logits
        if select_index is not None:
            logits = logits[select_index]
        topk_p, topk_index = fast_topk(torch.softmax(logits, dim=-1), self.topk, dim=-1)
        return DraftExtendResult(logits, None, topk_p, topk_index)

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner.forward (skip_attn_backend_init)
    # expect: clean
    @retry_forward(retries=1)
    def run_extend_legacy_mlp_sync(
        self, forward_batch: ForwardBatch, select_index: Optional[torch.Tensor] = None
    ) -> DraftExtendResult:
        pre_planned = False
        if not forward_batch.forward_mode.is_idle() and not require_mlp_sync():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            pre_planned = True
        # Under MLP sync nothing was planned here and the forward plans the
        # padded batch itself.
        logits_output = self.draft_runner.forward(
            forward_batch, skip_attn_backend_init=pre_planned
        ).logits_output
        logits = logits_output.next_token_logits
        if select_index is not None:
            logits = logits[select_index]
        topk_p, topk_index = fast_topk(torch.softmax(logits, dim=-1), self.topk, dim=-1)
        return DraftExtendResult(logits, None, topk_p, topk_index)
