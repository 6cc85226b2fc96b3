"""Standalone (separate small model) draft worker: prefill-side draft extend."""

from __future__ import annotations

import dataclasses
import logging

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker

logger = logging.getLogger(__name__)


class PrefillPlannedStandaloneDraftWorker(StandaloneDraftWorker):
    """Standalone draft whose prefill-side extend plans outside forward."""

    def _prefill_extend_batch(
        self, batch: ScheduleBatch, target_hidden_states: torch.Tensor
    ) -> ForwardBatch:
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=target_hidden_states,
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
        return forward_batch

    # expect: SG106
    def draft_extend_prefill_preplanned(
        self, batch: ScheduleBatch, target_hidden_states: torch.Tensor
    ):
        forward_batch = self._prefill_extend_batch(batch, target_hidden_states)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.apply_deprecated_skip_attn_backend_init(True)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_prefill_flag_off(
        self, batch: ScheduleBatch, target_hidden_states: torch.Tensor
    ):
        """Same call shape, but the legacy flag is False: nothing is marked."""
        forward_batch = self._prefill_extend_batch(batch, target_hidden_states)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.apply_deprecated_skip_attn_backend_init(False)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_prefill_on_copy(
        self, batch: ScheduleBatch, target_hidden_states: torch.Tensor
    ):
        forward_batch = self._prefill_extend_batch(batch, target_hidden_states)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        run_fb = dataclasses.replace(forward_batch, return_logprob=False)
        return self.draft_runner.forward(run_fb).logits_output

    # expect: clean
    def draft_extend_prefill_fresh_batch(
        self, batch: ScheduleBatch, target_hidden_states: torch.Tensor
    ):
        """The planned batch is only used to size buffers; a fresh, unplanned
        batch is forwarded."""
        sizing_fb = self._prefill_extend_batch(batch, target_hidden_states)
        self.draft_runner.attn_backend.init_forward_metadata(sizing_fb)
        sizing_fb.mark_forward_metadata_ready()
        num_tokens = sizing_fb.input_ids.shape[0]
        logger.debug("standalone prefill extend: %d tokens", num_tokens)
        run_fb = self._prefill_extend_batch(batch, target_hidden_states)
        return self.draft_runner.forward(run_fb).logits_output
