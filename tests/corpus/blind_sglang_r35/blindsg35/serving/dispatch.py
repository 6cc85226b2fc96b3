"""getattr-style dispatch on the forward mode: one ``_prepare_<mode>`` per mode."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

from blindsg35.serving.state import PlannedBatch

if TYPE_CHECKING:
    from sglang.srt.managers.tp_worker import TpModelWorker

    from blindsg35.serving.strategies.base import BaseDraftStrategy

logger = logging.getLogger(__name__)


class ModeDispatcher:
    def __init__(self, strategy: "BaseDraftStrategy", target_worker: "TpModelWorker"):
        self.strategy = strategy
        self.draft_runner = strategy.draft_runner
        self.target_runner = target_worker.model_runner

    def _handler(self, forward_batch: ForwardBatch) -> Callable[[ForwardBatch], PlannedBatch]:
        name = f"_prepare_{forward_batch.forward_mode.name.lower()}"
        return getattr(self, name, self._prepare_default)

    def _runner(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_target_verify():
            return self.target_runner
        return self.draft_runner

    def run(self, forward_batch: ForwardBatch, select_index: Optional[torch.Tensor] = None):
        planned = self._handler(forward_batch)(forward_batch)
        if planned.can_run_graph:
            return self.target_runner.decode_cuda_graph_runner.execute(
                planned.forward_batch
            )
        out = self._runner(forward_batch).forward(planned.forward_batch).logits_output
        if select_index is not None:
            out.next_token_logits = out.next_token_logits[select_index]
        return out

    @staticmethod
    def _prepare_default(forward_batch: ForwardBatch) -> PlannedBatch:
        return PlannedBatch(forward_batch, planned=False)

    @staticmethod
    def _prepare_idle(forward_batch: ForwardBatch) -> PlannedBatch:
        return PlannedBatch(forward_batch, planned=False)

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
    # expect: SG106
    def _prepare_draft_extend_v2(self, forward_batch: ForwardBatch) -> PlannedBatch:
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return PlannedBatch(forward_batch, planned=True)

    # idiom: sglang/srt/speculative/eagle_utils.py eagle_prepare_for_verify
    # expect: clean
    def _prepare_target_verify(self, forward_batch: ForwardBatch) -> PlannedBatch:
        graph_runner = self.target_runner.decode_cuda_graph_runner
        if graph_runner and graph_runner.can_run_graph(forward_batch):
            graph_runner.load_batch(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            return PlannedBatch(forward_batch, planned=True, can_run_graph=True)
        # Eager TARGET_VERIFY is re-planned by the eager runner from the final
        # batch, so an early plan here only warms the indices.
        self.target_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return PlannedBatch(forward_batch, planned=True)
