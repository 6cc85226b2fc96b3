"""Draft-extend manager that pads for DP attention itself.

It uses the DP padding mixin so the plan can be taken on the final shapes and
the eager runner launched directly (no second padding in ModelRunner).
"""

from __future__ import annotations

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg22.managers.dp_padding import DPPaddingMixin


class ForkDPDraftExtendManager(DPPaddingMixin):
    draft_runner: ModelRunner

    def __init__(self, draft_runner: ModelRunner):
        self.draft_runner = draft_runner

    def _finish(
        self, forward_batch: ForwardBatch, logits_output: LogitsProcessorOutput
    ) -> LogitsProcessorOutput:
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(logits_output)
        return logits_output

    # idiom: sglang/srt/managers/scheduler_components/dp_attn.py padding reached from another manager (ForwardBatch.prepare_mlp_sync_batch via ModelRunner._prepare_eager_forward_batch) after a marked plan
    # expect: SG106
    def run_padded_draft_extend(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        runner = self.draft_runner
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        self._pad_for_dp(forward_batch, runner)
        logits_output = runner.eager_runner.execute(forward_batch)
        return self._finish(forward_batch, logits_output)

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._prepare_eager_forward_batch then re-plan on the padded batch
    # expect: clean
    def run_padded_draft_extend_replan(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        runner = self.draft_runner
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        self._pad_for_dp(forward_batch, runner)
        # Padding reshaped the batch: plan again on the final shapes.
        runner.attn_backend.init_forward_metadata(forward_batch)
        logits_output = runner.eager_runner.execute(forward_batch)
        return self._finish(forward_batch, logits_output)

    # idiom: sglang/srt/model_executor/forward_batch_info.py ForwardBatch.mark_forward_metadata_ready (plan record taken after prepare_mlp_sync_batch)
    # expect: SG106
    def run_mark_after_pad(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        runner = self.draft_runner
        runner.attn_backend.init_forward_metadata(forward_batch)
        self._pad_for_dp(forward_batch, runner)
        # Record the plan once the batch has its final (padded) shape.
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        logits_output = runner.eager_runner.execute(forward_batch)
        return self._finish(forward_batch, logits_output)

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._forward_raw (pad first, then plan and mark)
    # expect: clean
    def run_pad_then_plan(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        runner = self.draft_runner
        self._pad_for_dp(forward_batch, runner)
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        logits_output = runner.eager_runner.execute(forward_batch)
        return self._finish(forward_batch, logits_output)
