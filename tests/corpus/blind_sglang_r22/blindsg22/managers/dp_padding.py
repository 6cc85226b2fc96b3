"""DP-attention padding helpers, shared by the fork's managers.

The scheduler's DP-attention adapter gathers every rank's token counts into
the ScheduleBatch (``global_num_tokens``); ``ForwardBatch.init_new`` copies
them over and ``ForwardBatch.prepare_mlp_sync_batch`` then pads the local
batch to the agreed shape.  Callers that need to plan attention on the final
(padded) shapes run that padding themselves through these helpers and then
launch the eager runner directly, exactly as ``ModelRunner._forward_raw``
does for its own eager path.
"""

from __future__ import annotations

from typing import Optional

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler_components.dp_attn import SchedulerDPAttnAdapter
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner


def pad_for_dp_attention(forward_batch: ForwardBatch, model_runner: ModelRunner) -> bool:
    """Pad ``forward_batch`` to its DP-synchronized shape; True if it padded."""
    if forward_batch.global_num_tokens_cpu is None:
        return False
    forward_batch.prepare_mlp_sync_batch(model_runner)
    return True


class DPPaddingMixin:
    """Gives a manager the runner's eager-path padding."""

    dp_attn_adapter: Optional[SchedulerDPAttnAdapter] = None

    def _sync_schedule_batch(self, batch: ScheduleBatch) -> ScheduleBatch:
        # Scheduler side: gathers counts only, never reshapes a ForwardBatch.
        if self.dp_attn_adapter is None:
            return batch
        return self.dp_attn_adapter.maybe_prepare_mlp_sync_batch(batch)

    def _pad_for_dp(self, forward_batch: ForwardBatch, model_runner: ModelRunner) -> None:
        # Forward side: the same padding ModelRunner runs before its eager forward.
        model_runner._prepare_eager_forward_batch(forward_batch)
