"""Standalone (separate small draft model) worker, carrying the fork's port of
the 0.5.x ``forward_draft_extend_after_decode`` flow."""

from __future__ import annotations

import logging

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker

logger = logging.getLogger(__name__)


class ForkStandaloneDraftWorker(StandaloneDraftWorker):
    def _extend_after_decode_batch(self, batch: ScheduleBatch) -> ForwardBatch:
        batch.spec_info.num_tokens_per_req = self.speculative_num_steps + 1
        batch.spec_info.num_tokens_for_logprob_per_req = 1
        batch.forward_mode = (
            ForwardMode.DRAFT_EXTEND_V2
            if not batch.forward_mode.is_idle()
            else ForwardMode.IDLE
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            return_hidden_states_before_norm=False,
        )
        if forward_batch.seq_lens_cpu is not None:
            forward_batch.seq_lens_sum = forward_batch.seq_lens_cpu.sum().item()
        else:
            forward_batch.seq_lens_sum = batch.seq_lens.sum().item()
        return forward_batch

    # expect: SG106
    def forward_draft_extend_after_decode(self, batch: ScheduleBatch):
        seq_lens_backup = batch.seq_lens.clone()
        input_is_idle = batch.forward_mode.is_idle()
        forward_batch = self._extend_after_decode_batch(batch)

        runner = self.cuda_graph_runner_for_draft_extend
        if runner is not None and runner.can_run_graph(forward_batch):
            logits_output = runner.execute(forward_batch, None)
        else:
            forward_batch.can_run_dp_cuda_graph = False
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            logits_output = self.draft_runner.forward(
                forward_batch, skip_attn_backend_init=True
            ).logits_output

        batch.forward_mode = ForwardMode.DECODE if not input_is_idle else ForwardMode.IDLE
        batch.seq_lens = seq_lens_backup
        return logits_output

    # expect: clean
    def forward_draft_extend_after_decode_padded(self, batch: ScheduleBatch):
        seq_lens_backup = batch.seq_lens.clone()
        input_is_idle = batch.forward_mode.is_idle()
        forward_batch = self._extend_after_decode_batch(batch)

        runner = self.cuda_graph_runner_for_draft_extend
        if runner is not None and runner.can_run_graph(forward_batch):
            logits_output = runner.execute(forward_batch, None)
        else:
            forward_batch.can_run_dp_cuda_graph = False
            # Pad for DP attention ourselves, then plan the final shapes and
            # run the eager runner (which honours the mark).
            if forward_batch.global_num_tokens_cpu is not None:
                forward_batch.prepare_mlp_sync_batch(self.draft_runner)
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.apply_deprecated_skip_attn_backend_init(True)
            logits_output = self.draft_runner.eager_runner.execute(forward_batch)
            if forward_batch.global_num_tokens_cpu is not None:
                forward_batch.post_forward_mlp_sync_batch(logits_output)

        batch.forward_mode = ForwardMode.DECODE if not input_is_idle else ForwardMode.IDLE
        batch.seq_lens = seq_lens_backup
        return logits_output

    # expect: SG106
    def draft_decode_skip_flag(self, forward_batch: ForwardBatch):
        multi_step = self.speculative_num_steps > 1
        if multi_step:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        # Upstream kwarg, mapped onto the readiness mark.
        forward_batch.apply_deprecated_skip_attn_backend_init(multi_step)
        return self.draft_forward(forward_batch)
