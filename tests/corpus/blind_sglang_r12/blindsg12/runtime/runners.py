"""Fork-side ModelRunner / TpModelWorker extensions for pre-planned batches."""

from __future__ import annotations

from typing import Optional

from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.runtime_context import get_parallel


class ForkModelRunner(ModelRunner):
    """ModelRunner with an eager entry that reuses an out-of-forward plan."""

    _preplan_in_forward: bool = True

    # expect: SG106
    def forward_preplanned_eager(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        self._prepare_eager_forward_batch(forward_batch)
        return self.eager_runner.execute(forward_batch)

    # expect: clean
    def forward_padded_then_planned(self, forward_batch: ForwardBatch):
        self._prepare_eager_forward_batch(forward_batch)
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.eager_runner.execute(forward_batch)

    # expect: SG106
    def forward(self, forward_batch: ForwardBatch, *args, **kwargs):
        if (
            self._preplan_in_forward
            and self.is_draft_worker
            and not forward_batch.forward_mode.is_idle()
            and forward_batch.needs_forward_metadata_init()
        ):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return super().forward(forward_batch, *args, **kwargs)

    # expect: clean
    def forward_graph_or_replan(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        runner = self.decode_cuda_graph_runner
        if runner is not None and runner.can_run_graph(forward_batch):
            return runner.execute(forward_batch)
        # Eager: drop the pre-pad plan so _forward_raw re-plans after padding.
        forward_batch.forward_metadata_ready = False
        return super().forward(forward_batch)


class ForkTpModelWorker(TpModelWorker):
    """TP worker entry used by the fork's plan-stream scheduler."""

    # expect: SG106
    def forward_batch_generation_preplanned(self, batch, capture_hidden_mode=None):
        forward_batch = ForwardBatch.init_new(
            batch, self.model_runner, capture_hidden_mode=capture_hidden_mode
        )
        if not forward_batch.forward_mode.is_idle():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.forward_batch_generation(
            None, forward_batch=forward_batch, skip_attn_backend_init=True
        )

    # expect: clean
    def forward_batch_generation_preplanned_dp(
        self, batch, capture_hidden_mode: Optional[object] = None
    ):
        forward_batch = ForwardBatch.init_new(
            batch, self.model_runner, capture_hidden_mode=capture_hidden_mode
        )
        skip: Optional[bool] = None
        if not forward_batch.forward_mode.is_idle() and not get_parallel().attn_dp_enabled:
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            skip = True
        return self.forward_batch_generation(
            None, forward_batch=forward_batch, skip_attn_backend_init=skip
        )
