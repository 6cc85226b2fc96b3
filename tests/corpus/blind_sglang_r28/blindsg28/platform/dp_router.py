"""Request router for DP attention: one router per attention-DP rank."""

from __future__ import annotations

import collections
import logging

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.utils.common import require_mlp_sync

from blindsg28.platform import planning

logger = logging.getLogger(__name__)


class DpAttentionRouter:
    def __init__(self, model_runner: ModelRunner, dp_rank: int):
        self.model_runner = model_runner
        self.dp_rank = dp_rank
        self.stats = collections.Counter()

    def _maybe_preplan(self, forward_batch: ForwardBatch) -> bool:
        if forward_batch.forward_mode.is_idle():
            return False
        if planning.graph_can_run(self.model_runner, forward_batch):
            return False
        self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return True

    # idiom: eagle_worker_v2.EagleDraftWorker.draft, twist: the plan decision comes back as a local bool from a helper method on self
    # expect: SG106
    def route_and_forward(self, batch: ScheduleBatch):
        forward_batch = ForwardBatch.init_new(
            batch, self.model_runner, return_hidden_states_before_norm=False
        )
        preplanned = self._maybe_preplan(forward_batch)
        self.stats["preplanned" if preplanned else "deferred"] += 1
        return self.model_runner.forward(forward_batch)

    # idiom: forward_batch_info.ForwardBatch.apply_deprecated_skip_attn_backend_init, twist: the fork sets forward_metadata_ready by hand instead of calling the marker
    # expect: SG106
    def forward_preplanned_flag(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle() and not planning.graph_can_run(
            self.model_runner, forward_batch
        ):
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.forward_metadata_ready = True
        return self.model_runner.forward(forward_batch)

    # idiom: eagle_worker_common.prepare_for_draft_extend (NPU branch keeps the batch unmarked), twist: the mark is kept only when no MLP-sync padding can follow
    # expect: clean
    def route_with_dp_gate(self, forward_batch: ForwardBatch):
        will_pad = require_mlp_sync()
        if not forward_batch.forward_mode.is_idle() and not planning.graph_can_run(
            self.model_runner, forward_batch
        ):
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            if not will_pad:
                forward_batch.mark_forward_metadata_ready()
        self.stats["dp_gated"] += 1
        return self.model_runner.forward(forward_batch)

    # idiom: forward_batch_info.ForwardBatch.needs_forward_metadata_init (shape check against the plan record), twist: the fork re-checks the recorded shapes itself after padding and re-plans
    # expect: clean
    def forward_checked(self, forward_batch: ForwardBatch):
        if planning.graph_can_run(self.model_runner, forward_batch):
            return self.model_runner.forward(forward_batch)
        backend = self.model_runner.attn_backend
        idle = forward_batch.forward_mode.is_idle()
        if not idle:
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        planning.pad_for_dp(forward_batch, self.model_runner)
        num_tokens = (
            forward_batch.input_ids.shape[0] if forward_batch.input_ids is not None else 0
        )
        stale = (
            forward_batch.batch_size != forward_batch.forward_metadata_planned_bs
            or num_tokens != forward_batch.forward_metadata_planned_num_tokens
        )
        if not idle and stale:
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            self.stats["replanned_after_pad"] += 1
        return planning.run_eager(self.model_runner, forward_batch)

    # idiom: model_runner.ModelRunner._forward_raw (DP padding, then the eager runner plans from the final batch), twist: the router runs the forward's padding itself and hands an unmarked batch to the eager runner
    # expect: clean
    def forward_padded_only(self, forward_batch: ForwardBatch):
        if planning.graph_can_run(self.model_runner, forward_batch):
            return self.model_runner.forward(forward_batch)
        planning.pad_for_dp(forward_batch, self.model_runner)
        self.stats["eager_unmarked"] += 1
        return planning.run_eager(self.model_runner, forward_batch)
