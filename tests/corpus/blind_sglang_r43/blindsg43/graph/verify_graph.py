"""Target-verify preparation for the fork's overlap scheduler.

The verify batch is built on the plan stream; whether the target runner will
replay a decode graph for it is decided here as well.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Tuple

from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.tp_worker import TpModelWorker
    from sglang.srt.speculative.eagle_info import EagleVerifyInput


def _build_verify_batch(
    batch: "ScheduleBatch", target_worker: "TpModelWorker"
) -> ForwardBatch:
    verify_input: "EagleVerifyInput" = batch.spec_info
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.TARGET_VERIFY
    )
    return ForwardBatch.init_new(
        batch,
        target_worker.model_runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_hidden_states_before_norm=False,
        spec_mrope_positions=verify_input.prepared_mrope_positions,
        kv_loc_plan=verify_input.kv_loc_plan,
    )


# expect: clean
def prepare_verify_graph_or_defer(
    batch: "ScheduleBatch", target_worker: "TpModelWorker"
) -> Tuple[ForwardBatch, bool]:
    verify_forward_batch = _build_verify_batch(batch, target_worker)
    graph_runner = target_worker.model_runner.decode_cuda_graph_runner
    can_run_cuda_graph = bool(
        graph_runner and graph_runner.can_run_graph(verify_forward_batch)
    )
    if can_run_cuda_graph:
        graph_runner.load_batch(verify_forward_batch)
        verify_forward_batch.mark_forward_metadata_ready()
    return verify_forward_batch, can_run_cuda_graph


# expect: clean
def verify_eager_preplanned(
    batch: "ScheduleBatch", target_worker: "TpModelWorker", pp_proxy_tensors=None
) -> GenerationBatchResult:
    """Verify with the plan issued before the target forward is launched."""
    model_runner = target_worker.model_runner
    verify_forward_batch = _build_verify_batch(batch, target_worker)
    graph_runner = model_runner.decode_cuda_graph_runner
    if graph_runner and graph_runner.can_run_graph(verify_forward_batch):
        graph_runner.load_batch(verify_forward_batch)
        verify_forward_batch.mark_forward_metadata_ready()
    elif not verify_forward_batch.forward_mode.is_idle():
        model_runner.attn_backend.init_forward_metadata(verify_forward_batch)
        verify_forward_batch.mark_forward_metadata_ready()
    return target_worker.forward_batch_generation(
        batch=None,
        forward_batch=verify_forward_batch,
        is_verify=True,
        pp_proxy_tensors=pp_proxy_tensors,
    )
