"""Fork draft-extend CUDA-graph runner with an in-runner eager fallback.

The fork's worker calls ``execute`` unconditionally; batches wider than the
largest captured bucket fall back to an eager forward on the draft runner
(``self.model_runner``), which applies DP padding before planning.
"""

from __future__ import annotations

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import (
    EAGLEDraftExtendCudaGraphRunner,
)


class EagerFallbackDraftExtendGraphRunner(EAGLEDraftExtendCudaGraphRunner):
    # expect: SG106
    def execute(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        if self.can_run_graph(forward_batch):
            return super().execute(forward_batch, select_index)
        # Over the captured bucket: same step, eagerly, on the draft runner.
        if not forward_batch.forward_mode.is_idle():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = self.model_runner.forward(forward_batch).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        if logits_output.hidden_states is not None:
            logits_output.hidden_states = logits_output.hidden_states[select_index]
        return logits_output


class PlainFallbackDraftExtendGraphRunner(EAGLEDraftExtendCudaGraphRunner):
    # expect: clean
    def execute(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        if self.can_run_graph(forward_batch):
            return super().execute(forward_batch, select_index)
        # Eager fallback: ModelRunner.forward pads, then plans the padded batch.
        logits_output = self.model_runner.forward(forward_batch).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        if logits_output.hidden_states is not None:
            logits_output.hidden_states = logits_output.hidden_states[select_index]
        return logits_output
