"""Adaptive speculative steps on top of the EAGLE draft worker."""

from __future__ import annotations

from typing import List

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

from blindsg22.managers.dp_padding import pad_for_dp_attention


class ForkAdaptiveEagleDraftWorker(EagleDraftWorker):
    """Draft worker that picks its step count per batch size."""

    draft_runner: ModelRunner
    adaptive_params: AdaptiveSpeculativeParams

    # idiom: sglang/srt/speculative/adaptive_spec_params.py AdaptiveSpeculativeParams.get_steps_for_batch feeding EagleDraftWorker.draft (non-graph branch)
    # expect: SG106
    def draft_adaptive_steps(self, forward_batch: ForwardBatch) -> List[torch.Tensor]:
        num_steps = self.adaptive_params.get_steps_for_batch(forward_batch.batch_size)
        step_logits: List[torch.Tensor] = []
        if num_steps > 1 and not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        for i in range(num_steps - 1):
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                output = self.draft_runner.forward(forward_batch)
            step_logits.append(output.logits_output.next_token_logits)
            forward_batch.positions.add_(1)
        return step_logits

    # idiom: sglang/srt/speculative/adaptive_spec_params.py get_steps_for_batch on the DP-padded size (every rank picks the same steps), padding before the plan
    # expect: clean
    def draft_adaptive_steps_padded(
        self, forward_batch: ForwardBatch
    ) -> List[torch.Tensor]:
        # Pad first: the step count must be chosen from the padded (rank-
        # uniform) batch size, and the plan must see the final shapes.
        pad_for_dp_attention(forward_batch, self.draft_runner)
        num_steps = self.adaptive_params.get_steps_for_batch(forward_batch.batch_size)
        step_logits: List[torch.Tensor] = []
        if num_steps > 1 and not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        for i in range(num_steps - 1):
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                logits_output = self.draft_runner.eager_runner.execute(forward_batch)
            step_logits.append(logits_output.next_token_logits)
            forward_batch.positions.add_(1)
        return step_logits
