"""TpModelWorker extensions: side-stream decode planning and hidden capture."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    PPProxyTensors,
)


class PrePlannedTpWorker(TpModelWorker):
    def enable_overlap_plan(self, plan_stream=None) -> None:
        self._overlap_plan = True
        self._plan_stream_ctx = (
            contextlib.nullcontext()
            if plan_stream is None
            else torch.cuda.stream(plan_stream)
        )

    def _replays_decode_graph(self, forward_batch: ForwardBatch) -> bool:
        # Graph replay plans inside load_batch; only the eager path is ours.
        runner = self.model_runner.decode_cuda_graph_runner
        return bool(
            forward_batch.forward_mode.is_cuda_graph()
            and runner is not None
            and runner.can_run_graph(forward_batch)
        )

    # expect: SG106
    def forward_batch_generation(
        self,
        batch: Optional[ScheduleBatch],
        forward_batch: Optional[ForwardBatch] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
        is_verify: bool = False,
        skip_attn_backend_init: Optional[bool] = None,
        *,
        capture_hidden_mode: Optional[CaptureHiddenMode] = None,
        return_kv_loc_plan: bool = False,
    ):
        if (
            batch is None
            and forward_batch is not None
            and forward_batch.forward_mode.is_decode()
            and not self._replays_decode_graph(forward_batch)
            and getattr(self, "_overlap_plan", False)
        ):
            # Plan on the side stream while the scheduler finishes the
            # previous step's bookkeeping.
            with self._plan_stream_ctx:
                self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            skip_attn_backend_init = True
        return super().forward_batch_generation(
            batch,
            forward_batch,
            pp_proxy_tensors,
            is_verify,
            skip_attn_backend_init,
            capture_hidden_mode=capture_hidden_mode,
            return_kv_loc_plan=return_kv_loc_plan,
        )

    # expect: SG106
    def forward_with_hidden_capture(self, forward_batch: ForwardBatch):
        """Decode and also capture the last hidden states for the external
        drafter."""
        self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        # Run on a shallow copy: MLP-sync padding mutates ForwardBatch fields
        # in place and the caller keeps using forward_batch afterwards.
        view = dataclasses.replace(
            forward_batch, capture_hidden_mode=CaptureHiddenMode.LAST
        )
        return self.model_runner.forward(view).logits_output

    # expect: clean
    def forward_with_hidden_capture_fresh(self, forward_batch: ForwardBatch):
        self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        # The copy is what the runner pads; it must plan its own (padded)
        # shape, so it does not inherit the original's planned mark.
        view = dataclasses.replace(
            forward_batch,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            forward_metadata_ready=False,
        )
        return self.model_runner.forward(view).logits_output


class SyncAwarePrePlannedTpWorker(TpModelWorker):
    def enable_overlap_plan(self, plan_stream=None) -> None:
        self._overlap_plan = True
        self._plan_stream_ctx = contextlib.nullcontext()

    def _replays_decode_graph(self, forward_batch: ForwardBatch) -> bool:
        # Graph replay plans inside load_batch; only the eager path is ours.
        runner = self.model_runner.decode_cuda_graph_runner
        return bool(
            forward_batch.forward_mode.is_cuda_graph()
            and runner is not None
            and runner.can_run_graph(forward_batch)
        )

    # expect: clean
    def forward_batch_generation(
        self,
        batch: Optional[ScheduleBatch],
        forward_batch: Optional[ForwardBatch] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
        is_verify: bool = False,
        skip_attn_backend_init: Optional[bool] = None,
        *,
        capture_hidden_mode: Optional[CaptureHiddenMode] = None,
        return_kv_loc_plan: bool = False,
    ):
        if (
            batch is None
            and forward_batch is not None
            and forward_batch.forward_mode.is_decode()
            and not self._replays_decode_graph(forward_batch)
            and forward_batch.global_num_tokens_cpu is None
            and getattr(self, "_overlap_plan", False)
        ):
            with self._plan_stream_ctx:
                self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            skip_attn_backend_init = True
        return super().forward_batch_generation(
            batch,
            forward_batch,
            pp_proxy_tensors,
            is_verify,
            skip_attn_backend_init,
            capture_hidden_mode=capture_hidden_mode,
            return_kv_loc_plan=return_kv_loc_plan,
        )
