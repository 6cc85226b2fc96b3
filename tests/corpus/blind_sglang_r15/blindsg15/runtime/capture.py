"""Warmup of the eager decode path with a synthetic, DP-uniform batch."""

from __future__ import annotations

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel


# expect: clean
def warmup_uniform_decode(model_runner, forward_batch: ForwardBatch, dp_size: int):
    """Every DP rank runs this with the same decode batch, so the MLP-sync pass
    pads each rank to its own count: the pre-plan is already final."""
    assert forward_batch.forward_mode.is_decode() and forward_batch.spec_info is None
    if model_runner.decode_cuda_graph_runner is not None:
        raise RuntimeError("eager warmup must run before decode graph capture")
    num_tokens = forward_batch.input_ids.shape[0]
    assert num_tokens == forward_batch.batch_size
    assert num_tokens % get_parallel().attn_tp_size == 0
    forward_batch.global_num_tokens_cpu = [num_tokens] * dp_size
    forward_batch.global_num_tokens_for_logprob_cpu = [num_tokens] * dp_size
    forward_batch.global_num_tokens_gpu = torch.tensor(
        forward_batch.global_num_tokens_cpu,
        dtype=torch.int64,
        device=forward_batch.input_ids.device,
    )
    forward_batch.is_extend_in_batch = False
    model_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return model_runner.forward(forward_batch)
