"""0.5.6-style entry points kept for downstream callers.

These keep the old ``skip_attn_backend_init=True`` calling convention
(``ModelRunner.forward`` / ``TpModelWorker.forward_batch_generation`` still
accept and map it) and the old ``draft_model_runner`` naming.
"""

from __future__ import annotations

from typing import Any, Dict

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.eagle_utils import eagle_prepare_for_verify
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker, EAGLEWorkerV2
from sglang.srt.utils.common import require_mlp_sync

LEGACY_FORWARD_KW: Dict[str, Any] = {"skip_attn_backend_init": True}


def _extend_after_decode_batch(batch: ScheduleBatch, runner: ModelRunner) -> ForwardBatch:
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DRAFT_EXTEND_V2
    )
    forward_batch = ForwardBatch.init_new(
        batch,
        runner,
        capture_hidden_mode=CaptureHiddenMode.LAST,
        return_hidden_states_before_norm=False,
    )
    if forward_batch.seq_lens_cpu is not None:
        forward_batch.seq_lens_sum = forward_batch.seq_lens_cpu.sum().item()
    else:
        forward_batch.seq_lens_sum = batch.seq_lens.sum().item()
    return forward_batch


# expect: SG106
def forward_draft_extend_after_decode(worker: EagleDraftWorker, batch: ScheduleBatch):
    draft_model_runner = worker.draft_runner
    forward_batch = _extend_after_decode_batch(batch, draft_model_runner)
    if not forward_batch.forward_mode.is_idle():
        draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
    logits_output = draft_model_runner.forward(
        forward_batch, skip_attn_backend_init=True
    ).logits_output
    return logits_output


# expect: clean
def forward_draft_extend_after_decode_v2(worker: EagleDraftWorker, batch: ScheduleBatch):
    draft_model_runner = worker.draft_runner
    forward_batch = _extend_after_decode_batch(batch, draft_model_runner)
    if not forward_batch.forward_mode.is_idle():
        draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
    logits_output = draft_model_runner.forward(
        forward_batch, skip_attn_backend_init=not require_mlp_sync()
    ).logits_output
    return logits_output


# expect: SG106
def draft_forward_v056(worker: EagleDraftWorker, forward_batch: ForwardBatch):
    assert forward_batch.forward_mode.is_decode()
    spec_info = forward_batch.spec_info
    out_cache_loc = forward_batch.out_cache_loc.reshape(
        forward_batch.batch_size, worker.topk, worker.speculative_num_steps
    )
    out_cache_loc = out_cache_loc.permute((2, 0, 1)).reshape(
        worker.speculative_num_steps, -1
    )
    worker.draft_attn_backend.init_forward_metadata(forward_batch)
    topk_index = spec_info.topk_index
    tokens = []
    for i in range(worker.speculative_num_steps - 1):
        forward_batch.input_ids = topk_index.flatten()
        forward_batch.out_cache_loc = out_cache_loc[i]
        forward_batch.positions.add_(1)
        logits_output = worker.draft_runner.forward(
            forward_batch, skip_attn_backend_init=True
        ).logits_output
        topk_index = logits_output.next_token_logits.argmax(dim=-1, keepdim=True)
        spec_info.hidden_states = logits_output.hidden_states
        tokens.append(topk_index)
    return tokens


# expect: clean
def verify_v056(worker: EAGLEWorkerV2, batch: ScheduleBatch):
    target_worker: TpModelWorker = worker.target_worker
    verify_forward_batch, can_run_graph = eagle_prepare_for_verify(
        batch.spec_info, worker.req_to_token_pool, batch, target_worker
    )
    if not can_run_graph and not verify_forward_batch.forward_mode.is_idle():
        target_worker.model_runner.attn_backend.init_forward_metadata(
            verify_forward_batch
        )
    return target_worker.forward_batch_generation(
        batch=None,
        forward_batch=verify_forward_batch,
        is_verify=True,
        skip_attn_backend_init=True,
    )


# expect: SG106
def draft_extend_on_tp_worker(worker: EagleDraftWorker, forward_batch: ForwardBatch):
    tp_worker: TpModelWorker = worker.draft_worker
    if forward_batch.forward_mode.is_draft_extend_v2():
        tp_worker.model_runner.attn_backend.init_forward_metadata(forward_batch)
    result = tp_worker.forward_batch_generation(
        batch=None, forward_batch=forward_batch, **LEGACY_FORWARD_KW
    )
    return result.logits_output


# expect: clean
def draft_extend_on_tp_worker_v2(worker: EagleDraftWorker, forward_batch: ForwardBatch):
    tp_worker: TpModelWorker = worker.draft_worker
    kwargs = dict(LEGACY_FORWARD_KW)
    if forward_batch.forward_mode.is_draft_extend_v2():
        tp_worker.model_runner.attn_backend.init_forward_metadata(forward_batch)
    if forward_batch.global_num_tokens_cpu is not None:
        kwargs["skip_attn_backend_init"] = False
    result = tp_worker.forward_batch_generation(
        batch=None, forward_batch=forward_batch, **kwargs
    )
    return result.logits_output


class LegacyEagleAdapter:
    """0.5.6 attribute names over a 0.5.23 EagleDraftWorker."""

    def __init__(self, worker: EagleDraftWorker):
        self.worker = worker
        self.target_worker: TpModelWorker = worker.target_worker

    @property
    def draft_model_runner(self) -> ModelRunner:
        return self.worker.draft_runner

    # expect: SG106
    def forward_draft_extend(self, batch: ScheduleBatch):
        forward_batch = _extend_after_decode_batch(batch, self.draft_model_runner)
        if forward_batch.forward_mode.is_idle():
            return self.draft_model_runner.forward(forward_batch).logits_output
        self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.draft_model_runner.forward(
            forward_batch, skip_attn_backend_init=True
        ).logits_output

    # expect: clean
    def forward_draft_extend_explicit(self, batch: ScheduleBatch):
        forward_batch = _extend_after_decode_batch(batch, self.draft_model_runner)
        if forward_batch.forward_mode.is_idle():
            return self.draft_model_runner.forward(forward_batch).logits_output
        self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.draft_model_runner.forward(
            forward_batch, skip_attn_backend_init=False
        ).logits_output
