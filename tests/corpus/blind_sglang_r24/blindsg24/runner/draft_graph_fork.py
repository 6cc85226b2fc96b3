"""Draft-extend CUDA-graph runner with an in-runner eager fallback, so the
worker can call one entry point whether or not the batch fits a graph."""

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import (
    EAGLEDraftExtendCudaGraphRunner,
)


class ForkDraftExtendGraphRunner(EAGLEDraftExtendCudaGraphRunner):
    def _eager_logits(self, logits_output, select_index: torch.Tensor):
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        if logits_output.hidden_states is not None:
            logits_output.hidden_states = logits_output.hidden_states[select_index]
        return logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (graph vs eager branch) + eagle_worker_common.prepare_for_draft_extend
    # expect: SG106
    def execute_or_eager(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        if self.can_run_graph(forward_batch):
            return self.execute(forward_batch, select_index)
        draft_runner = self.eagle_worker.draft_runner
        if not forward_batch.forward_mode.is_idle():
            # Graph miss: plan the eager batch with the draft-extend backend.
            self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = draft_runner.forward(forward_batch).logits_output
        return self._eager_logits(logits_output, select_index)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (eager branch left to ModelRunner)
    # expect: clean
    def execute_or_eager_unplanned(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ):
        if self.can_run_graph(forward_batch):
            return self.execute(forward_batch, select_index)
        # Graph miss: ModelRunner pads for DP attention and plans after it.
        logits_output = self.eagle_worker.draft_runner.forward(
            forward_batch
        ).logits_output
        return self._eager_logits(logits_output, select_index)
