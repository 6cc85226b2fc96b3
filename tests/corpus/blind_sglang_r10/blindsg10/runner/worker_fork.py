"""TpModelWorker with a decode entry for batches the scheduler pre-planned."""

from __future__ import annotations

from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.utils.common import require_mlp_sync


class ForkTpModelWorker(TpModelWorker):
    def _decode_graph_ready(self, forward_batch: ForwardBatch) -> bool:
        graph_runner = self.model_runner.decode_cuda_graph_runner
        return bool(graph_runner and graph_runner.can_run_graph(forward_batch))

    # expect: SG106
    def forward_decode_preplanned(self, forward_batch: ForwardBatch):
        """Decode whose attention metadata is built on the scheduler's plan stream."""
        if self._decode_graph_ready(forward_batch):
            return self.forward_batch_generation(batch=None, forward_batch=forward_batch)
        if not forward_batch.forward_mode.is_idle():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.forward_batch_generation(
            batch=None,
            forward_batch=forward_batch,
            skip_attn_backend_init=True,
        )

    # expect: clean
    def forward_decode_preplanned_mlp_sync_aware(self, forward_batch: ForwardBatch):
        if self._decode_graph_ready(forward_batch):
            return self.forward_batch_generation(batch=None, forward_batch=forward_batch)
        # Under MLP sync the forward pads the batch first, so it has to plan it.
        preplan = not require_mlp_sync() and not forward_batch.forward_mode.is_idle()
        if preplan:
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.forward_batch_generation(
            batch=None,
            forward_batch=forward_batch,
            skip_attn_backend_init=True if preplan else None,
        )
