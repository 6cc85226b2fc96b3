"""Mixin with the planning helpers every reliability-team worker shares."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

from blindsg29.config import VendorServingFlags, get_vendor_flags
from blindsg29.reliability import plan_utils

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


class PrePlanMixin:
    """Expects ``self.model_runner`` (the runner the batch executes on)."""

    model_runner: "ModelRunner"
    _vendor_flags: Optional[VendorServingFlags] = None

    @property
    def flags(self) -> VendorServingFlags:
        if self._vendor_flags is None:
            self._vendor_flags = get_vendor_flags(
                getattr(self, "server_args", None)
            )
        return self._vendor_flags

    @property
    def planning_backend(self) -> Any:
        return self.model_runner.attn_backend

    def _dp_attention_on(self) -> bool:
        return self.flags.dp_attention_on

    def _preplan(self, forward_batch: ForwardBatch, *, replan_equivalent: bool = False):
        if forward_batch.forward_mode.is_idle():
            return forward_batch
        self.planning_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
        return forward_batch

    def _graph_can_run(self, forward_batch: ForwardBatch) -> bool:
        runner = getattr(self.model_runner, "decode_cuda_graph_runner", None)
        return plan_utils.decode_graph_can_run(runner, forward_batch)

    # idiom: eagle_worker_v2.EagleDraftWorker.draft (pre-plan + mark, then ModelRunner.forward on the eager path), via a mixin helper
    # expect: SG106
    def run_preplanned_decode(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.model_runner.forward(forward_batch).logits_output
        if self._graph_can_run(forward_batch):
            return self.model_runner.forward(forward_batch).logits_output
        self._preplan(forward_batch)
        out = self.model_runner.forward(forward_batch)
        return out.logits_output

    # idiom: eagle_worker_v2.EagleDraftWorker.draft, mixin helper called with replan_equivalent=True so the runner re-plans after MLP-sync padding
    # expect: clean
    def run_replannable_decode(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.model_runner.forward(forward_batch).logits_output
        if not self._graph_can_run(forward_batch):
            self._preplan(forward_batch, replan_equivalent=True)
        return self.model_runner.forward(forward_batch).logits_output

    # idiom: eagle_worker_common.prepare_for_draft_extend, planning a shallow preview copy for a cost probe while the live batch stays unmarked
    # expect: clean
    def run_with_plan_probe(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            preview = dataclasses.replace(forward_batch)
            try:
                self.planning_backend.init_forward_metadata(preview)
                preview.mark_forward_metadata_ready()
            except Exception as exc:  # probe only
                logger.warning("plan probe failed: %s", exc)
        return self.model_runner.forward(forward_batch).logits_output
