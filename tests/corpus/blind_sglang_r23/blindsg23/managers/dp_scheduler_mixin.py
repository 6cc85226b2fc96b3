"""Scheduler-side draft launches for the fork's DP-attention deployment.

The scheduler's MLP-sync gather (``SchedulerDPAttnAdapter``) runs first and
stamps ``global_num_tokens`` on the schedule batch; the ForwardBatch built from
it is then padded by the model runner to the DP-wide shape.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler_components.dp_attn import SchedulerDPAttnAdapter
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.utils.common import require_mlp_sync


class DPDraftSchedulerMixin:
    dp_attn_adapter: SchedulerDPAttnAdapter
    draft_runner: ModelRunner

    def _eager_decode(self, forward_batch: ForwardBatch) -> bool:
        if not forward_batch.forward_mode.is_decode():
            return False
        graph = self.draft_runner.decode_cuda_graph_runner
        return graph is None or not graph.can_run_graph(forward_batch)

    def _draft_fb(self, batch: ScheduleBatch) -> ForwardBatch:
        return ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
        )

    # idiom: managers/scheduler_components/dp_attn.py SchedulerDPAttnAdapter.maybe_prepare_mlp_sync_batch -> ForwardBatch.init_new -> ModelRunner.forward
    # expect: SG106
    def run_draft_decode_step(self, batch: Optional[ScheduleBatch]):
        batch = self.dp_attn_adapter.maybe_prepare_mlp_sync_batch(batch)
        if batch is None:
            return None
        forward_batch = self._draft_fb(batch)
        if self._eager_decode(forward_batch):
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch)

    # idiom: managers/scheduler_components/dp_attn.py SchedulerDPAttnAdapter.maybe_prepare_mlp_sync_batch (pre-plan only a rank-local batch)
    # expect: clean
    def run_draft_decode_step_unsynced(self, batch: Optional[ScheduleBatch]):
        batch = self.dp_attn_adapter.maybe_prepare_mlp_sync_batch(batch)
        if batch is None:
            return None
        forward_batch = self._draft_fb(batch)
        # A batch that went through the DP gather is padded by the forward;
        # only a rank-local batch may keep a pre-plan.
        if self._eager_decode(forward_batch) and batch.global_num_tokens is None:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch)


class OverlapDraftScheduler(DPDraftSchedulerMixin):
    """Launches draft extend from the overlap loop."""

    draft_extend_graph_runner = None

    def _graph_for(self, forward_batch: ForwardBatch):
        graph = self.draft_extend_graph_runner
        if graph is not None and graph.can_run_graph(forward_batch):
            return graph
        return None

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (idle / graph / eager early returns)
    # expect: SG106
    def launch_draft_extend(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        if forward_batch.forward_mode.is_idle():
            # Idle DP ranks still join the collectives.
            return self.draft_runner.forward(forward_batch)
        graph = self._graph_for(forward_batch)
        if graph is not None:
            return graph.execute(forward_batch, select_index)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch)

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode + utils/common.py require_mlp_sync (no pre-plan under DP)
    # expect: clean
    def launch_draft_extend_guarded(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch)
        graph = self._graph_for(forward_batch)
        if graph is not None:
            return graph.execute(forward_batch, select_index)
        if require_mlp_sync():
            # DP attention: the forward pads this batch; let it plan.
            return self.draft_runner.forward(forward_batch)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch)
