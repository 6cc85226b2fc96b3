"""Verify and micro-batch drivers shared by the lookahead workers."""

from __future__ import annotations

from typing import List, Sequence

from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

from blindsg27.runtime.eager import (
    forward_draft_extend_eager,
    forward_padded_respecting_mark,
    forward_prepadded,
    pad_for_dp,
)


# idiom: eagle_utils.eagle_prepare_for_verify (graph load_batch + mark on the cuda-graph path only; eager left to forward_extend)
# expect: clean
def run_target_verify_graph_marked(target_worker: TpModelWorker, verify_forward_batch: ForwardBatch):
    model_runner = target_worker.model_runner
    graph_runner = model_runner.decode_cuda_graph_runner
    can_run_cuda_graph = bool(
        graph_runner and graph_runner.can_run_graph(verify_forward_batch)
    )
    if can_run_cuda_graph:
        graph_runner.load_batch(verify_forward_batch)
        verify_forward_batch.mark_forward_metadata_ready()
    return target_worker.forward_batch_generation(
        batch=None, forward_batch=verify_forward_batch, is_verify=True
    )


# idiom: ngram_worker / dflash_info.prepare_for_verify + forward_batch_generation(skip_attn_backend_init=True) on TARGET_VERIFY (eager re-plans verify)
# expect: clean
def run_target_verify_skip_init(target_worker: TpModelWorker, verify_forward_batch: ForwardBatch):
    model_runner = target_worker.model_runner
    graph_runner = model_runner.decode_cuda_graph_runner
    if graph_runner is not None and graph_runner.can_run_graph(verify_forward_batch):
        graph_runner.load_batch(verify_forward_batch)
    elif verify_forward_batch.forward_mode.is_target_verify():
        model_runner.attn_backend.init_forward_metadata(verify_forward_batch)
    return target_worker.forward_batch_generation(
        batch=None,
        forward_batch=verify_forward_batch,
        is_verify=True,
        skip_attn_backend_init=True,
    )


# idiom: eagle_worker_common.prepare_for_draft_extend applied to several micro-batches (plan+mark all, then forward all)
# expect: SG106
def run_draft_micro_batches(draft_runner, forward_batches: Sequence[ForwardBatch]) -> List:
    for fb in forward_batches:
        if fb.forward_mode.is_idle():
            continue
        draft_runner.attn_backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()
    outputs = []
    for fb in forward_batches:
        outputs.append(draft_runner.forward(fb).logits_output)
    return outputs


# idiom: model_runner.ModelRunner._forward_raw per micro-batch (pad, then plan the padded batch, then the eager runner)
# expect: clean
def run_draft_micro_batches_padded_first(draft_runner, forward_batches: Sequence[ForwardBatch]) -> List:
    outputs = []
    for fb in forward_batches:
        pad_for_dp(draft_runner, fb)
        if fb.batch_size > 0:
            draft_runner.attn_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()
        outputs.append(forward_prepadded(draft_runner, fb))
    return outputs


# idiom: eagle_worker_common.prepare_for_draft_extend (explicit replan_equivalent=False mark before ModelRunner.forward)
# expect: SG106
def run_draft_extend_marked_explicit_false(draft_runner, forward_batch: ForwardBatch):
    if not forward_batch.forward_mode.is_idle():
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        # Same backend, same batch: the plan is final.
        forward_batch.mark_forward_metadata_ready(replan_equivalent=False)
    return draft_runner.forward(forward_batch).logits_output


# idiom: eagle_worker_v2.EagleDraftWorker.draft one-step path (pre-plan only when global_num_tokens_cpu is None: no MLP sync)
# expect: clean
def run_draft_decode_one_step_local(draft_runner, forward_batch: ForwardBatch):
    if forward_batch.global_num_tokens_cpu is None and not forward_batch.forward_mode.is_idle():
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return draft_runner.forward(forward_batch).logits_output


# idiom: runner/eager_runner.EagerRunner._execute_extend (always re-plan the final batch) through a draft-extend helper
# expect: clean
def run_draft_extend_always_replan(draft_runner, forward_batch: ForwardBatch):
    if not (forward_batch.forward_mode.is_draft_extend_v2() or forward_batch.forward_mode.is_idle()):
        raise ValueError(f"expected a draft-extend batch, got {forward_batch.forward_mode}")
    if not forward_batch.forward_mode.is_idle():
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return forward_draft_extend_eager(draft_runner, forward_batch)


# idiom: model_runner.ModelRunner._forward_raw + EagerRunner (needs_forward_metadata_init after padding) through a fork helper
# expect: SG106
def run_draft_extend_respecting_mark(draft_runner, forward_batch: ForwardBatch):
    if not forward_batch.forward_mode.is_idle():
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return forward_padded_respecting_mark(draft_runner, forward_batch)


# idiom: standalone_worker_v2 draft decode through TpModelWorker.forward_batch_generation(skip_attn_backend_init=True)
# expect: SG106
def run_draft_decode_via_worker(draft_worker: TpModelWorker, forward_batch: ForwardBatch):
    if not forward_batch.forward_mode.is_idle():
        draft_worker.model_runner.attn_backend.init_forward_metadata(forward_batch)
    result = draft_worker.forward_batch_generation(
        batch=None, forward_batch=forward_batch, skip_attn_backend_init=True
    )
    return result.logits_output
