"""The startup's own wrapper around the draft ModelRunner.

``MTPDraftRunner`` owns one NextN head's ModelRunner and exposes the few
forward flavours the workers need (plain, pre-planned, pad-first).
"""

from __future__ import annotations

import logging
from typing import Optional

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.server_args import ServerArgs

from blindsg34.mtp.flags import batch_will_be_padded

logger = logging.getLogger(__name__)


class MTPDraftRunner:
    def __init__(self, model_runner: ModelRunner, server_args: ServerArgs):
        self.model_runner = model_runner
        self.server_args = server_args
        # Same object the EagerRunner re-plans with (model_runner.attn_backend).
        self.attn_backend = model_runner.attn_backend

    # -- small helpers -----------------------------------------------------
    def pad_for_dp(self, forward_batch: ForwardBatch) -> None:
        """Run the DP / MLP-sync padding ModelRunner._forward_raw would run."""
        self.model_runner._prepare_eager_forward_batch(forward_batch)

    def _unpad(self, forward_batch: ForwardBatch, out) -> LogitsProcessorOutput:
        if (
            forward_batch.global_num_tokens_cpu is not None
            and self.model_runner.pp_group.is_last_rank
        ):
            forward_batch.post_forward_mlp_sync_batch(out)
        return out

    def execute_eager(self, forward_batch: ForwardBatch):
        """EagerRunner.execute under the context _forward_raw would set up; no
        padding, no planning of its own beyond needs_forward_metadata_init."""
        with forward_context(
            ForwardContext(attn_backend=self.model_runner.attn_backend),
            forward_batch=forward_batch,
        ):
            return self.model_runner.eager_runner.execute(forward_batch)

    def run(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        return self.model_runner.forward(forward_batch).logits_output

    # -- forward flavours ----------------------------------------------------
    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (plan + mark_forward_metadata_ready, then ModelRunner.forward)
    # expect: SG106
    def forward_preplanned(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        if forward_batch.forward_mode.is_idle():
            return self.run(forward_batch)
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.model_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/dllm/algorithm/base.py DllmAlgorithm._run_sync (mark_forward_metadata_ready(replan_equivalent=...))
    # expect: clean
    def forward_preplanned_replannable(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        if forward_batch.forward_mode.is_idle():
            return self.run(forward_batch)
        # Planned with the runner's own backend and no special context, so the
        # eager runner's post-pad re-plan is equivalent: opt in.
        self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.model_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/model_executor/forward_batch_info.py ForwardBatch.apply_deprecated_skip_attn_backend_init (0.5.6 forward(skip_attn_backend_init=True))
    # expect: SG106
    def forward_legacy(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        # Kept for the 0.5.6-era callers: plan here, tell the forward to skip.
        if not forward_batch.forward_mode.is_idle():
            self.attn_backend.init_forward_metadata(forward_batch)
        out = self.model_runner.forward(
            forward_batch, skip_attn_backend_init=not forward_batch.forward_mode.is_idle()
        )
        return out.logits_output

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._forward_raw (_prepare_eager_forward_batch before EagerRunner.execute)
    # expect: clean
    def forward_pad_then_plan(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        self.pad_for_dp(forward_batch)
        if not forward_batch.forward_mode.is_idle():
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        out = self.execute_eager(forward_batch)
        return self._unpad(forward_batch, out)

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._forward_raw (_prepare_eager_forward_batch before EagerRunner.execute)
    # expect: SG106
    def forward_plan_then_pad(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        planned = not forward_batch.forward_mode.is_idle()
        if planned:
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        # Padding after the plan so the plan stream can run ahead of the
        # all-gather of token counts.
        self.pad_for_dp(forward_batch)
        out = self.execute_eager(forward_batch)
        return self._unpad(forward_batch, out)

    # idiom: sglang/srt/model_executor/forward_batch_info.py ForwardBatch.mark_forward_metadata_ready (marker fields)
    # expect: SG106
    def forward_with_warm_plan(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        if forward_batch.forward_mode.is_idle():
            return self.run(forward_batch)
        self.attn_backend.init_forward_metadata(forward_batch)
        # Hand-set the marker so autotune sees a ready batch (no plan record).
        forward_batch.forward_metadata_ready = True
        return self.model_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/model_executor/forward_batch_info.py ForwardBatch.mark_forward_metadata_ready (marker fields)
    # expect: clean
    def forward_with_warm_plan_dp_safe(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        if forward_batch.forward_mode.is_idle():
            return self.run(forward_batch)
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if batch_will_be_padded(forward_batch):
            # DP padding will reshape the batch; drop the pre-pad plan record so
            # the eager runner plans the padded batch itself.
            forward_batch.forward_metadata_ready = False
            forward_batch.forward_metadata_planned_bs = None
            forward_batch.forward_metadata_planned_num_tokens = None
        return self.model_runner.forward(forward_batch).logits_output
