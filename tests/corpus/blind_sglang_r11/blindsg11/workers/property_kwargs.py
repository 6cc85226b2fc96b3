"""Draft worker whose draft-extend forward kwargs come from a property, so the
adaptive controller can change the planning contract at runtime."""

from __future__ import annotations

from typing import Any, Dict

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import require_mlp_sync


class PropertyKwargsDraftWorker(EagleDraftWorker):
    @property
    def draft_extend_forward_kwargs(self) -> Dict[str, Any]:
        # draft_extend_preplanned() plans on the plan stream before calling us.
        return {"skip_attn_backend_init": True}

    @property
    def draft_extend_forward_kwargs_synced(self) -> Dict[str, Any]:
        # Under MLP sync the runner pads inside forward; only skip its init
        # when no padding can happen.
        return {"skip_attn_backend_init": None if require_mlp_sync() else True}

    def _plan_on_stream(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        with self.plan_stream_ctx:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)

    # expect: SG106
    def draft_extend_preplanned(self, forward_batch: ForwardBatch):
        self._plan_on_stream(forward_batch)
        out = self.draft_runner.forward(
            forward_batch, **self.draft_extend_forward_kwargs
        )
        return out.logits_output

    # expect: clean
    def draft_extend_preplanned_synced(self, forward_batch: ForwardBatch):
        self._plan_on_stream(forward_batch)
        out = self.draft_runner.forward(
            forward_batch, **self.draft_extend_forward_kwargs_synced
        )
        return out.logits_output
