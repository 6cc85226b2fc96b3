"""Plan-ahead on a side stream.

The overlap team issues the next step's attention planning on a dedicated
stream so that host-side planning work (index packing, wrapper plans) hides
behind the previous step's compute.
"""

from __future__ import annotations

import contextlib
from typing import Any, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg28.platform import planning


class SideStreamPlanner:
    def __init__(
        self,
        model_runner: ModelRunner,
        draft_attn_backend: Optional[Any] = None,
        device: str = "cuda",
    ):
        self.model_runner = model_runner
        self._draft_attn_backend = draft_attn_backend
        self.device = device
        self.plan_stream = (
            torch.get_device_module(device).Stream() if device == "cuda" else None
        )
        self.plan_stream_ctx = (
            torch.get_device_module(device).stream(self.plan_stream)
            if self.plan_stream is not None
            else contextlib.nullcontext()
        )
        self.num_planned = 0
        self.num_warm_plans = 0

    @property
    def attn_backend(self):
        if self._draft_attn_backend is not None:
            return self._draft_attn_backend
        return self.model_runner.attn_backend

    def _enter_plan_stream(self) -> None:
        if self.plan_stream is not None:
            self.plan_stream.wait_stream(
                torch.get_device_module(self.device).current_stream()
            )

    def _join_plan_stream(self) -> None:
        if self.plan_stream is not None:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )

    # idiom: eagle_worker_v2.EagleDraftWorker.draft (init_forward_metadata + mark_forward_metadata_ready when no graph), twist: the plan is issued inside a side-stream context
    # expect: SG106
    def plan_ahead_and_forward(self, forward_batch: ForwardBatch):
        can_graph = planning.graph_can_run(self.model_runner, forward_batch)
        if not can_graph and not forward_batch.forward_mode.is_idle():
            self._enter_plan_stream()
            with self.plan_stream_ctx:
                self.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            self._join_plan_stream()
            self.num_planned += 1
        # ModelRunner.forward pads for DP attention after the side-stream plan
        return self.model_runner.forward(forward_batch)

    # idiom: multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker._draft_extend_for_decode (plans pre-pad but leaves the batch unmarked), twist: the warm plan runs on the side stream
    # expect: clean
    def warm_plan_then_forward(self, forward_batch: ForwardBatch):
        can_graph = planning.graph_can_run(self.model_runner, forward_batch)
        if not can_graph and not forward_batch.forward_mode.is_idle():
            self._enter_plan_stream()
            with self.plan_stream_ctx:
                # Warms the backend's index buffers; the batch stays unmarked so
                # the forward re-plans the padded shape itself.
                self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            self._join_plan_stream()
            self.num_warm_plans += 1
        return self.model_runner.forward(forward_batch)

    # idiom: eagle_utils.eagle_prepare_for_verify (load_batch + mark only when the decode graph runs), twist: load_batch issued on the side stream
    # expect: clean
    def plan_graph_ahead(self, forward_batch: ForwardBatch):
        graph_runner = self.model_runner.decode_cuda_graph_runner
        if planning.graph_can_run(self.model_runner, forward_batch):
            self._enter_plan_stream()
            with self.plan_stream_ctx:
                graph_runner.load_batch(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            self._join_plan_stream()
            self.num_planned += 1
        # Non-graph batches stay unmarked: the eager forward plans post-pad.
        return self.model_runner.forward(forward_batch)

    # idiom: eagle_worker_v2.EagleDraftWorker.draft, twist: backend reached through a property and the launch wrapped in a closure
    # expect: SG106
    def forward_with_closure(self, forward_batch: ForwardBatch):
        backend = self.attn_backend

        def _launch():
            return self.model_runner.forward(forward_batch)

        if planning.graph_can_run(self.model_runner, forward_batch):
            return _launch()
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        self.num_planned += 1
        return _launch()
