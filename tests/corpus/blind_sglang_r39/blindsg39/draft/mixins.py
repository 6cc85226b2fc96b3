"""Planning mixins shared by the fork's speculative workers.

The concrete workers (``eagle_draft``, ``frozen_kv``, ``multi_layer``) mix
these in; they provide ``draft_runner`` / ``draft_attn_backend`` /
``draft_extend_attn_backend`` / ``server_args`` / ``target_worker``.
"""

from __future__ import annotations

import logging
from functools import cached_property

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.utils.common import require_mlp_sync

logger = logging.getLogger(__name__)


class DpAttentionStateMixin:
    """Resolves once whether forwards of this worker get DP / MLP-sync padding."""

    @cached_property
    def dp_attention_on(self) -> bool:
        server_args = self.server_args
        return bool(server_args.enable_dp_attention) or require_mlp_sync()

    @cached_property
    def pads_for_mlp_sync(self) -> bool:
        return require_mlp_sync()


class DraftPlanMixin:
    """Pre-planning helpers for the draft-decode and draft-extend batches."""

    replan_after_pad: bool = False

    def _pad_for_mlp_sync(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self.draft_runner)

    def _preplan_draft(self, forward_batch: ForwardBatch) -> None:
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=self.replan_after_pad
        )

    def _forward_replanned(self, runner, attn_backend, forward_batch: ForwardBatch):
        """MLP-sync pad, plan, mark, run."""
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(runner)
        if not forward_batch.forward_mode.is_idle():
            attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return runner.forward(forward_batch)


class DraftExtendPlanMixin:
    """Default draft-extend pre-plan: plan and mark with the extend backend."""

    def _plan_extend(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()


class DraftExtendRunnerMixin:
    """Eager draft-extend runners used when the draft-extend graph is off."""

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (eager branch)
    # expect: SG106
    def _run_extend_eager(self, forward_batch: ForwardBatch, select_index):
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        if logits_output.hidden_states is not None:
            logits_output.hidden_states = logits_output.hidden_states[select_index]
        return logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (eager branch)
    # expect: clean
    def _run_extend_eager_guarded(self, forward_batch: ForwardBatch, select_index):
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            if self.dp_attention_on:
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            else:
                forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        if logits_output.hidden_states is not None:
            logits_output.hidden_states = logits_output.hidden_states[select_index]
        return logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (plan stream)
    # expect: SG106
    def _run_draft_extend_tf(self, forward_batch: ForwardBatch):
        stream = self.plan_stream
        if stream is not None:
            stream.wait_stream(torch.cuda.current_stream())
        graph_runner = self.cuda_graph_runner_for_draft_extend
        try:
            with self.plan_stream_ctx:
                forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
                if graph_runner is not None and graph_runner.can_run_graph(
                    forward_batch
                ):
                    return graph_runner.execute(forward_batch, None)
                self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        finally:
            if stream is not None:
                torch.cuda.current_stream().wait_stream(stream)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (marker reset)
    # expect: clean
    def _run_extend_reset_marker(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        if self.dp_attention_on:
            forward_batch.forward_metadata_ready = False
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (marker reset)
    # expect: SG106
    def _run_extend_reset_marker_verify_only(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        if self.dp_attention_on and forward_batch.forward_mode.is_target_verify():
            forward_batch.forward_metadata_ready = False
        return self.draft_runner.forward(forward_batch).logits_output


class VerifyRunnerMixin:
    """Target-verify runner used by the fork's non-graph verify path."""

    # idiom: sglang/srt/speculative/eagle_worker_common.py run_eagle_verify (plan stream + eager verify)
    # expect: clean
    def _run_verify_tf(self, verify_forward_batch: ForwardBatch):
        stream = self.plan_stream
        if stream is not None:
            stream.wait_stream(torch.cuda.current_stream())
        model_runner = self.target_worker.model_runner
        graph_runner = model_runner.decode_cuda_graph_runner
        try:
            with self.plan_stream_ctx:
                verify_forward_batch.forward_mode = ForwardMode.TARGET_VERIFY
                if graph_runner is not None and graph_runner.can_run_graph(
                    verify_forward_batch
                ):
                    graph_runner.load_batch(verify_forward_batch)
                else:
                    model_runner.attn_backend.init_forward_metadata(
                        verify_forward_batch
                    )
                verify_forward_batch.mark_forward_metadata_ready()
        finally:
            if stream is not None:
                torch.cuda.current_stream().wait_stream(stream)
        return model_runner.forward(verify_forward_batch)
