"""Graph-or-eager dispatch for the NextN draft loop and the draft decode graph."""

from __future__ import annotations

import logging
from typing import Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_draft_cuda_graph_runner import (
    EAGLEDraftCudaGraphRunner,
)
from sglang.srt.utils.common import require_mlp_sync

logger = logging.getLogger(__name__)


class MTPDraftGraphDispatcher:
    def __init__(self, worker, graph_runner: Optional[EAGLEDraftCudaGraphRunner]):
        self.worker = worker
        self.graph_runner = graph_runner
        self.draft_attn_backend = worker.draft_attn_backend

    def _graph_ok(self, forward_batch: ForwardBatch) -> bool:
        return bool(
            self.graph_runner is not None
            and self.graph_runner.can_run_graph(forward_batch)
        )

    # idiom: sglang/srt/speculative/eagle_draft_cuda_graph_runner.py EAGLEDraftCudaGraphRunner.execute (eager fallback as in EagleDraftWorker.draft)
    # expect: SG106
    def execute_or_fallback(self, forward_batch: ForwardBatch):
        if self._graph_ok(forward_batch):
            return self.graph_runner.execute(forward_batch)
        logger.debug("NextN draft: no captured graph for bs=%d", forward_batch.batch_size)
        if not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.worker.nextn_draft_forward(forward_batch)

    # idiom: sglang/srt/speculative/eagle_utils.py eagle_prepare_for_verify (load_batch + mark only on the graph path)
    # expect: clean
    def execute_via_runner_graph(self, forward_batch: ForwardBatch):
        draft_runner = self.worker.draft_runner
        graph = draft_runner.decode_cuda_graph_runner
        if graph is not None and graph.can_run_graph(forward_batch):
            # load_batch pads to the captured bucket and plans that shape;
            # _forward_raw then replays without DP-padding the live batch.
            graph.load_batch(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            return draft_runner.forward(forward_batch).logits_output
        # Eager: unmarked, planned by the forward after prepare_mlp_sync_batch.
        return draft_runner.forward(forward_batch).logits_output


class MTPDraftGraphDispatcherNoDP(MTPDraftGraphDispatcher):
    # idiom: sglang/srt/speculative/eagle_draft_cuda_graph_runner.py EAGLEDraftCudaGraphRunner.execute (eager fallback as in EagleDraftWorker.draft)
    # expect: clean
    def execute_or_fallback(self, forward_batch: ForwardBatch):
        if self._graph_ok(forward_batch):
            return self.graph_runner.execute(forward_batch)
        assert not require_mlp_sync(), (
            "eager NextN draft fallback is not supported with DP attention / "
            "MLP sync; capture the draft graph for every DP bucket"
        )
        if not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.worker.nextn_draft_forward(forward_batch)
