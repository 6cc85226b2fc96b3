"""Draft-extend graph runner with an in-runner eager path.

``EAGLEDraftExtendCudaGraphRunner.execute`` already gathers ``select_index``
rows before the LM head; the eager branch below mirrors that so callers get
the same shapes whichever path ran.
"""

from __future__ import annotations

import torch

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import (
    EAGLEDraftExtendCudaGraphRunner,
)


def _select_rows(
    out: LogitsProcessorOutput, select_index: torch.Tensor
) -> LogitsProcessorOutput:
    out.next_token_logits = out.next_token_logits[select_index]
    if out.hidden_states is not None:
        out.hidden_states = out.hidden_states[select_index]
    return out


class ForkDraftExtendGraphRunner(EAGLEDraftExtendCudaGraphRunner):
    """Draft-extend runner; the eager fallback lives here instead of the worker."""

    def _eager(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        return self.model_runner.forward(forward_batch).logits_output

    # expect: SG106
    def run_or_fallback(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> LogitsProcessorOutput:
        if self.can_run_graph(forward_batch):
            return self.execute(forward_batch, select_index)
        if not forward_batch.forward_mode.is_idle():
            self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return _select_rows(self._eager(forward_batch), select_index)

    # expect: clean
    def run_or_forward(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> LogitsProcessorOutput:
        if self.can_run_graph(forward_batch):
            return self.execute(forward_batch, select_index)
        return _select_rows(self._eager(forward_batch), select_index)

    # expect: clean
    def run_or_fallback_planned(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> LogitsProcessorOutput:
        if self.can_run_graph(forward_batch):
            return self.execute(forward_batch, select_index)
        if not forward_batch.forward_mode.is_idle():
            self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return _select_rows(self._eager(forward_batch), select_index)
