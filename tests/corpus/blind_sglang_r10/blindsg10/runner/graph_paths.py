"""CUDA-graph replay entry points used by the fork's verify scheduler."""

from __future__ import annotations

from typing import Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, PPProxyTensors


# expect: clean
def replay_target_verify(
    target_worker,
    verify_forward_batch: ForwardBatch,
    pp_proxy_tensors: Optional[PPProxyTensors] = None,
):
    """Replay the target-verify graph; ``None`` when this batch cannot replay."""
    graph_runner = target_worker.model_runner.decode_cuda_graph_runner
    if graph_runner is None or not graph_runner.can_run_graph(verify_forward_batch):
        return None
    # Fills the captured buffers (padded to the graph's bs) and plans on them.
    graph_runner.load_batch(verify_forward_batch)
    verify_forward_batch.mark_forward_metadata_ready()
    return graph_runner.execute(verify_forward_batch, pp_proxy_tensors=pp_proxy_tensors)
