"""Draft-extend CUDA-graph runner fork with an eager fallback.

When a batch cannot replay a captured graph (too large, DP padding mode, ...)
the fork falls back to the draft model runner instead of raising.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import (
    EAGLEDraftExtendCudaGraphRunner,
)


class ForkDraftExtendGraphRunner(EAGLEDraftExtendCudaGraphRunner):
    model_runner: ModelRunner
    _staged_batch: Optional[ForwardBatch] = None

    # idiom: sglang/srt/speculative/eagle_draft_extend_cuda_graph_runner.py EAGLEDraftExtendCudaGraphRunner.execute with an eager replay fallback
    # expect: SG106
    def run_or_fallback(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> LogitsProcessorOutput:
        if self.can_run_graph(forward_batch):
            return self.execute(forward_batch, select_index)
        model_runner = self.model_runner
        model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        logits_output = model_runner.forward(forward_batch).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        return logits_output

    # idiom: sglang/srt/speculative/eagle_draft_extend_cuda_graph_runner.py EAGLEDraftExtendCudaGraphRunner.execute, fallback leaves planning to ModelRunner
    # expect: clean
    def run_or_fallback_unmarked(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> LogitsProcessorOutput:
        if self.can_run_graph(forward_batch):
            return self.execute(forward_batch, select_index)
        model_runner = self.model_runner
        # Warm the backend's buffers; ModelRunner plans the padded batch itself.
        model_runner.attn_backend.init_forward_metadata(forward_batch)
        logits_output = model_runner.forward(forward_batch).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        return logits_output

    # -- staged metadata, cached on the runner (unjudged helpers) ---------

    def stage(self, forward_batch: ForwardBatch, replan_equivalent: bool = False) -> None:
        """Plan-stream half: plan and remember the batch for the replay half."""
        self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
        self._staged_batch = forward_batch

    def replay_staged(self, select_index: torch.Tensor) -> LogitsProcessorOutput:
        """Compute-stream half: graph replay, or the runner's eager forward."""
        forward_batch = self._staged_batch
        self._staged_batch = None
        if self.can_run_graph(forward_batch):
            return self.execute(forward_batch, select_index)
        logits_output = self.model_runner.forward(forward_batch).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        return logits_output

    # idiom: sglang/srt/model_executor/runner/decode_cuda_graph_runner.py load_batch / execute split (metadata staged on the runner, replayed later)
    # expect: SG106
    def step(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> LogitsProcessorOutput:
        self.stage(forward_batch)
        return self.replay_staged(select_index)

    # idiom: sglang/srt/model_executor/runner/decode_cuda_graph_runner.py load_batch / execute split, stage recorded replan-equivalent
    # expect: clean
    def step_replan(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> LogitsProcessorOutput:
        self.stage(forward_batch, replan_equivalent=True)
        return self.replay_staged(select_index)
