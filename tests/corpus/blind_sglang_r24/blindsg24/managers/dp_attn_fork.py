"""Scheduler-side helpers for the fork's DP-attention deployment: small
one-shot forwards issued outside the normal run_batch loop (warm-up probes,
rank-local drafts)."""

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.model_runner import ModelRunner


def _rank_local_decode_batch(
    model_runner: ModelRunner,
    input_ids: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    out_cache_loc: torch.Tensor,
) -> ForwardBatch:
    seq_lens_cpu = seq_lens.cpu()
    forward_batch = ForwardBatch(
        forward_mode=ForwardMode.DECODE,
        batch_size=len(seq_lens),
        input_ids=input_ids,
        req_pool_indices=req_pool_indices,
        seq_lens=seq_lens,
        out_cache_loc=out_cache_loc,
        seq_lens_sum=int(seq_lens_cpu.sum()),
        seq_lens_cpu=seq_lens_cpu,
        positions=(seq_lens - 1).to(torch.int64),
        capture_hidden_mode=CaptureHiddenMode.NULL,
        return_hidden_states_before_norm=False,
    )
    model_runner.kv_index_translator.bind_own_plan(forward_batch)
    return forward_batch


# idiom: sglang/srt/speculative/uno_worker_v2.py UnoWorkerV2._make_forward_batch (hand-built ForwardBatch, no global_num_tokens) + pre-plan
# expect: clean
def run_rank_local_decode(
    model_runner: ModelRunner,
    input_ids: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    out_cache_loc: torch.Tensor,
):
    forward_batch = _rank_local_decode_batch(
        model_runner, input_ids, req_pool_indices, seq_lens, out_cache_loc
    )
    graph_runner = model_runner.decode_cuda_graph_runner
    if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
        # Graph replay loads its own metadata (load_batch).
        return model_runner.forward(forward_batch).logits_output
    # Never MLP-synced (no global_num_tokens): the runner will not pad it.
    model_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return model_runner.forward(forward_batch).logits_output


# idiom: sglang/srt/model_executor/forward_batch_info.py ForwardBatch.init_mlp_sync_metadata on a hand-built batch + pre-plan
# expect: SG106
def run_synced_decode(
    model_runner: ModelRunner,
    batch: ScheduleBatch,
    input_ids: torch.Tensor,
    out_cache_loc: torch.Tensor,
):
    forward_batch = _rank_local_decode_batch(
        model_runner, input_ids, batch.req_pool_indices, batch.seq_lens, out_cache_loc
    )
    # Join this rank's DP-attention round: copy the gathered token counts.
    forward_batch.init_mlp_sync_metadata(batch, model_runner.device)
    model_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return model_runner.forward(forward_batch).logits_output


# idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill; ForwardBatch.forward_metadata_ready set by hand
# expect: SG106
def run_synced_draft_prefill(draft_runner: ModelRunner, batch: ScheduleBatch):
    forward_batch = ForwardBatch.init_new(
        batch,
        draft_runner,
        capture_hidden_mode=CaptureHiddenMode.LAST,
        return_hidden_states_before_norm=False,
    )
    if not forward_batch.forward_mode.is_idle():
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.forward_metadata_ready = True
    return draft_runner.forward(forward_batch).logits_output


# idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill (inference-mode probe, pre-planned)
# expect: SG106
@torch.inference_mode()
def probe_draft_extend(draft_runner: ModelRunner, batch: ScheduleBatch):
    batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
    forward_batch = ForwardBatch.init_new(
        batch,
        draft_runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_hidden_states_before_norm=False,
    )
    draft_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    out = draft_runner.forward(forward_batch)
    return out.logits_output.next_token_logits.float().isfinite().all()


# idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill (inference-mode probe, planning left to ModelRunner)
# expect: clean
@torch.inference_mode()
def probe_draft_extend_unplanned(draft_runner: ModelRunner, batch: ScheduleBatch):
    batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
    forward_batch = ForwardBatch.init_new(
        batch,
        draft_runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_hidden_states_before_norm=False,
    )
    # Build index buffers early; unmarked, so the runner plans post-pad.
    draft_runner.attn_backend.init_forward_metadata(forward_batch)
    out = draft_runner.forward(forward_batch)
    return out.logits_output.next_token_logits.float().isfinite().all()
