"""ROCm draft-extend runner: graph replay when it fits, eager otherwise."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner


class RocmDraftExtendRunner:
    def __init__(self, model_runner: "ModelRunner", graph_runner=None):
        self.model_runner = model_runner
        self.graph_runner = graph_runner
        self.backend = model_runner.attn_backend

    def run(self, forward_batch: ForwardBatch, select_index):
        if self.graph_runner is not None and self.graph_runner.can_run_graph(
            forward_batch
        ):
            return self.graph_runner.execute(forward_batch, select_index)
        return self.run_eager(forward_batch)

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend; eager DRAFT_EXTEND_V2 fallback plans + marks, then ModelRunner.forward
    # expect: SG106
    def run_eager(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=False)
        return self.model_runner.forward(forward_batch).logits_output
