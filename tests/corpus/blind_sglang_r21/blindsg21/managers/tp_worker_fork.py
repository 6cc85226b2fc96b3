"""TpModelWorker overrides: overlap the decode attention plan with the
scheduler's CPU work by planning as soon as the ForwardBatch exists."""

from __future__ import annotations

from typing import Optional

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    PPProxyTensors,
)


def _decode_graph_can_run(model_runner, forward_batch: ForwardBatch) -> bool:
    graph = model_runner.decode_cuda_graph_runner
    return bool(graph and graph.can_run_graph(forward_batch))


class PrePlanTpModelWorker(TpModelWorker):
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
        if batch is not None and batch.forward_mode.is_decode():
            self.set_hicache_consumer(batch.hicache_consumer_index)
            forward_batch = ForwardBatch.init_new(
                batch,
                self.model_runner,
                capture_hidden_mode=capture_hidden_mode,
                return_hidden_states_before_norm=False,
            )
            if not _decode_graph_can_run(self.model_runner, forward_batch):
                self.model_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            batch, capture_hidden_mode = None, None
        return super().forward_batch_generation(
            batch,
            forward_batch,
            pp_proxy_tensors,
            is_verify,
            skip_attn_backend_init,
            capture_hidden_mode=capture_hidden_mode,
            return_kv_loc_plan=return_kv_loc_plan,
        )


class GatedPrePlanTpModelWorker(TpModelWorker):
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
        # Only batches that skip the MLP-sync pass keep their shape through
        # ModelRunner.forward; everything else is planned by the runner.
        if (
            batch is not None
            and batch.forward_mode.is_decode()
            and batch.global_num_tokens is None
        ):
            self.set_hicache_consumer(batch.hicache_consumer_index)
            forward_batch = ForwardBatch.init_new(
                batch,
                self.model_runner,
                capture_hidden_mode=capture_hidden_mode,
                return_hidden_states_before_norm=False,
            )
            if not _decode_graph_can_run(self.model_runner, forward_batch):
                self.model_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            batch, capture_hidden_mode = None, None
        return super().forward_batch_generation(
            batch,
            forward_batch,
            pp_proxy_tensors,
            is_verify,
            skip_attn_backend_init,
            capture_hidden_mode=capture_hidden_mode,
            return_kv_loc_plan=return_kv_loc_plan,
        )
