"""Standalone draft worker: prefill draft extend with plan-stream overlap."""

from __future__ import annotations

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker
from sglang.srt.utils.common import fast_topk


class ForkStandaloneDraftWorker(StandaloneDraftWorker):
    def _build_prefill_extend_batch(self, batch: ScheduleBatch) -> ForwardBatch:
        # Standalone drafts carry no target hidden states.
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
        return forward_batch

    def _plan_on_plan_stream(self, forward_batch: ForwardBatch) -> None:
        with self.plan_stream_ctx:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        if self.plan_stream is not None:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )

    def _first_draft_topk(self, logits_output):
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        return fast_topk(probs, self.topk, dim=-1)

    # expect: SG106
    def _draft_prefill_extend(self, batch: ScheduleBatch):
        forward_batch = self._build_prefill_extend_batch(batch)
        if not forward_batch.forward_mode.is_idle():
            self._plan_on_plan_stream(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._first_draft_topk(logits_output)

    # expect: clean
    def _draft_prefill_extend_replan_safe(self, batch: ScheduleBatch):
        forward_batch = self._build_prefill_extend_batch(batch)
        if not forward_batch.forward_mode.is_idle():
            self._plan_on_plan_stream(forward_batch)
            # The forward re-plans if the DP / attn-TP pad reshapes the batch.
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._first_draft_topk(logits_output)
