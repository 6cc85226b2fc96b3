"""Target-verify and chained-step helpers for the fork's spec workers."""

from __future__ import annotations

from typing import Any, List, Sequence

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg18.common.dp_padding import DraftStep


# expect: clean
def run_verify_graph_preplanned(target_worker: Any, verify_forward_batch: ForwardBatch):
    """Target verify: only the CUDA-graph path is planned ahead (load_batch
    pads into the captured buffers first); eager verify is planned by
    forward_extend after the runner's DP padding."""
    runner = target_worker.model_runner
    graph_runner = runner.decode_cuda_graph_runner
    can_run_graph = bool(graph_runner and graph_runner.can_run_graph(verify_forward_batch))
    if can_run_graph:
        graph_runner.load_batch(verify_forward_batch)
        verify_forward_batch.mark_forward_metadata_ready()
    result = target_worker.forward_batch_generation(
        batch=None,
        forward_batch=verify_forward_batch,
        is_verify=True,
    )
    return result.logits_output, can_run_graph


# expect: clean
def run_chained_steps_unmarked(steps: Sequence[DraftStep]) -> List[torch.Tensor]:
    """Chained draft steps whose plans only warm the backends' buffers: the
    batches stay unmarked, so every forward plans itself post-pad."""
    tokens: List[torch.Tensor] = []
    for step in steps:
        step.plan(mark=False)
        logits_output = step.run()
        tokens.append(torch.argmax(logits_output.next_token_logits, dim=-1))
    return tokens


# expect: clean
def run_draft_extend_single_dp(draft_runner: ModelRunner, forward_batch: ForwardBatch):
    assert not draft_runner.server_args.enable_dp_attention, (
        "run_draft_extend_single_dp pre-plans the draft batch; DP attention "
        "pads it afterwards"
    )
    if not forward_batch.forward_mode.is_idle():
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return draft_runner.forward(forward_batch).logits_output
