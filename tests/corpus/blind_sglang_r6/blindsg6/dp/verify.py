"""Target-verify batch preparation for a DP-attention deployment."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)

from blindsg6.dp.helpers import stamp_global_tokens

if TYPE_CHECKING:
    from sglang.srt.managers.tp_worker import TpModelWorker
    from sglang.srt.speculative.eagle_info import EagleVerifyInput


def _build_verify_batch(
    batch: ScheduleBatch, target_worker: "TpModelWorker", verify_input: "EagleVerifyInput"
) -> ForwardBatch:
    batch.spec_info = verify_input
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.TARGET_VERIFY
    )
    return ForwardBatch.init_new(
        batch,
        target_worker.model_runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        kv_loc_plan=verify_input.kv_loc_plan,
    )


def _prepare_verify_eager(batch, target_worker, verify_input):
    """Eager (non-graph) verify prep that plans up front to hide CPU latency."""
    fb = _build_verify_batch(batch, target_worker, verify_input)
    if not fb.forward_mode.is_idle():
        target_worker.model_runner.attn_backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()
    return fb


def _prepare_verify_graph_or_defer(batch, target_worker, verify_input, global_num_tokens):
    """Graph path loads static buffers; eager path defers planning."""
    fb = _build_verify_batch(batch, target_worker, verify_input)
    # stamp before graph eligibility is decided, as init_new does for real batches
    stamp_global_tokens(fb, global_num_tokens)
    graph_runner = target_worker.model_runner.decode_cuda_graph_runner
    can_run_cuda_graph = bool(graph_runner and graph_runner.can_run_graph(fb))
    if can_run_cuda_graph:
        graph_runner.load_batch(fb)
        fb.mark_forward_metadata_ready()
    return fb, can_run_cuda_graph


# expect: SG106
def verify_eager_dp(batch, target_worker, verify_input, global_num_tokens):
    verify_fb = _prepare_verify_eager(batch, target_worker, verify_input)
    stamp_global_tokens(verify_fb, global_num_tokens)
    verify_fb.prepare_mlp_sync_batch(target_worker.model_runner)
    return target_worker.forward_batch_generation(
        batch=None, forward_batch=verify_fb, is_verify=True
    )


# expect: clean
def verify_graph_or_defer_dp(batch, target_worker, verify_input, global_num_tokens):
    verify_fb, _ = _prepare_verify_graph_or_defer(
        batch, target_worker, verify_input, global_num_tokens
    )
    # non-graph: forward pads then plans; graph: replay pads static buffers
    return target_worker.forward_batch_generation(
        batch=None, forward_batch=verify_fb, is_verify=True
    )


# expect: SG106
def verify_with_legacy_kwargs(target_worker, verify_fb: ForwardBatch, global_num_tokens):
    gen_kwargs = {"is_verify": True, "skip_attn_backend_init": True}
    target_worker.model_runner.attn_backend.init_forward_metadata(verify_fb)
    stamp_global_tokens(verify_fb, global_num_tokens)
    return target_worker.forward_batch_generation(
        None, forward_batch=verify_fb, **gen_kwargs
    )


# expect: clean
def verify_with_legacy_kwargs_off(target_worker, verify_fb: ForwardBatch, global_num_tokens):
    gen_kwargs = {"is_verify": True, "skip_attn_backend_init": False}
    target_worker.model_runner.attn_backend.init_forward_metadata(verify_fb)
    stamp_global_tokens(verify_fb, global_num_tokens)
    return target_worker.forward_batch_generation(
        None, forward_batch=verify_fb, **gen_kwargs
    )


class DPVerifyRunner:
    """Owns the verify plan policy for one target worker."""

    def __init__(self, target_worker: "TpModelWorker", replannable: bool):
        self.target_worker = target_worker
        self.runner = target_worker.model_runner
        self.mark_opts = {"replan_equivalent": replannable}

    def _plan(self, fb: ForwardBatch) -> None:
        self.runner.attn_backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready(**self.mark_opts)


class PinnedVerifyRunner(DPVerifyRunner):
    def __init__(self, target_worker: "TpModelWorker"):
        super().__init__(target_worker, replannable=False)

    # expect: SG106
    def run(self, fb: ForwardBatch, pp_proxy_tensors: Optional[object] = None):
        self._plan(fb)
        if fb.global_num_tokens_cpu is not None:
            fb.prepare_mlp_sync_batch(self.runner)
        return self.runner.forward(fb, pp_proxy_tensors=pp_proxy_tensors)


class ReplannableVerifyRunner(DPVerifyRunner):
    def __init__(self, target_worker: "TpModelWorker"):
        super().__init__(target_worker, replannable=True)

    # expect: clean
    def run(self, fb: ForwardBatch, pp_proxy_tensors: Optional[object] = None):
        self._plan(fb)
        if fb.global_num_tokens_cpu is not None:
            fb.prepare_mlp_sync_batch(self.runner)
        return self.runner.forward(fb, pp_proxy_tensors=pp_proxy_tensors)
