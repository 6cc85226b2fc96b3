"""Target-verify batch preparation for the fork's DFlash-style verifier."""

from __future__ import annotations

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleVerifyInput


# expect: clean
def run_target_verify(target_worker, batch: ScheduleBatch, verify_input: EagleVerifyInput):
    runner = target_worker.model_runner
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.TARGET_VERIFY
    )
    batch.spec_info = verify_input
    forward_batch = ForwardBatch.init_new(
        batch,
        runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_hidden_states_before_norm=False,
        kv_loc_plan=verify_input.kv_loc_plan,
    )
    graph = runner.decode_cuda_graph_runner
    can_run_graph = bool(graph and graph.can_run_graph(forward_batch))
    if can_run_graph:
        # Stage the replay buffers (and their metadata) at the graph's bucket
        # size now; execute() skips the second load.
        graph.load_batch(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    # Eager: nothing planned here; ModelRunner.forward pads for DP attention
    # and the eager runner plans the padded batch.
    out = runner.forward(forward_batch)
    return out.logits_output, can_run_graph
