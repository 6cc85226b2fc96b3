"""Draft-step mixins shared by the MTP workers; subclasses override one step."""

from __future__ import annotations

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg34.mtp.flags import batch_will_be_padded


class DraftStepMixin:
    draft_runner: ModelRunner

    def _plan_step(self, forward_batch: ForwardBatch) -> None:
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker._init_frozen_kv_metadata (plan + mark, then ModelRunner.forward)
    # expect: SG106
    def run_draft_step(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        self._plan_step(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output


class PaddedDraftStepMixin(DraftStepMixin):
    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker._init_frozen_kv_metadata (plan + mark, then ModelRunner.forward)
    # expect: clean
    def run_draft_step(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        if forward_batch.forward_mode.is_idle() or batch_will_be_padded(forward_batch):
            # DP-padded batches are planned by the forward, post-pad.
            return self.draft_runner.forward(forward_batch).logits_output
        self._plan_step(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output
