"""Target-verify glue for the fork's EAGLE worker (module functions in the
style of upstream ``eagle_utils``)."""

from __future__ import annotations

import logging
from typing import Any, Tuple

from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)

logger = logging.getLogger(__name__)


def _verify_forward_batch(batch, verify_input, target_worker) -> ForwardBatch:
    batch.spec_info = verify_input
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.TARGET_VERIFY
    )
    return ForwardBatch.init_new(
        batch,
        target_worker.model_runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_hidden_states_before_norm=False,
        kv_loc_plan=verify_input.kv_loc_plan,
    )


# expect: clean
def fork_prepare_and_run_verify(batch, verify_input, target_worker) -> Tuple[Any, bool]:
    verify_forward_batch = _verify_forward_batch(batch, verify_input, target_worker)
    graph_runner = target_worker.model_runner.decode_cuda_graph_runner
    can_run_cuda_graph = bool(
        graph_runner and graph_runner.can_run_graph(verify_forward_batch)
    )
    if can_run_cuda_graph:
        # Graph replay never goes through the MLP-sync padding of the eager
        # path; the runner's static buffers are already padded.
        graph_runner.load_batch(verify_forward_batch)
        verify_forward_batch.mark_forward_metadata_ready()
    # Eager: unmarked, planned by forward_extend after padding.
    result = target_worker.forward_batch_generation(
        batch=None,
        forward_batch=verify_forward_batch,
        is_verify=True,
    )
    return result, can_run_cuda_graph


# expect: clean
def fork_run_verify_preplanned(batch, verify_input, target_worker):
    verify_forward_batch = _verify_forward_batch(batch, verify_input, target_worker)
    graph_runner = target_worker.model_runner.decode_cuda_graph_runner
    if graph_runner is not None and graph_runner.can_run_graph(verify_forward_batch):
        graph_runner.load_batch(verify_forward_batch)
        verify_forward_batch.mark_forward_metadata_ready()
    elif not verify_forward_batch.forward_mode.is_idle():
        # Planned early so a bad tree mask fails here, next to the draft.
        # TARGET_VERIFY is re-planned by the eager extend path (and by the
        # prefill graph) from the final padded batch regardless of the mark.
        target_worker.model_runner.attn_backend.init_forward_metadata(
            verify_forward_batch
        )
        verify_forward_batch.mark_forward_metadata_ready()
    return target_worker.forward_batch_generation(
        batch=None,
        forward_batch=verify_forward_batch,
        is_verify=True,
    )


# expect: SG106
def fork_verify_then_draft_extend(worker, batch, verify_input, draft_extend_batch):
    result, _ = fork_prepare_and_run_verify(batch, verify_input, worker.target_worker)
    draft_runner = worker.draft_runner
    if not draft_extend_batch.forward_mode.is_idle():
        draft_runner.attn_backend.init_forward_metadata(draft_extend_batch)
        draft_extend_batch.mark_forward_metadata_ready()
    draft_out = draft_runner.forward(draft_extend_batch).logits_output
    return result, draft_out
