"""Out-of-forward attention planning used by the Kestrel speculative workers.

The Kestrel draft kernels are cheaper when the attention metadata is planned
once on the plan stream and reused across the draft steps, so most entry
points here plan a ForwardBatch before handing it to ModelRunner.forward.
"""

from __future__ import annotations

import functools
from typing import Any, List, Optional, Sequence

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.utils.common import require_mlp_sync

from blindsg38.vendor_config import KestrelParallelConfig, dp_attention_active


def plan_and_mark(backend, forward_batch: ForwardBatch, *, replan_equivalent: bool = False):
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return forward_batch


def pad_for_dp(forward_batch: ForwardBatch, model_runner: ModelRunner) -> ForwardBatch:
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(model_runner)
    return forward_batch


def kestrel_prepare_for_draft_extend(
    draft_extend_input: EagleDraftExtendInput,
    batch: ScheduleBatch,
    predict: torch.Tensor,
    num_draft_tokens: int,
    draft_model_runner: ModelRunner,
    *,
    replan_equivalent: bool = False,
    kv_loc_plan: Optional[KVLocPlan] = None,
) -> ForwardBatch:
    bs = len(batch.seq_lens)
    batch.spec_info = draft_extend_input
    batch.input_ids = predict
    batch.extend_lens = [num_draft_tokens] * bs
    batch.extend_num_tokens = bs * num_draft_tokens
    batch.prefix_lens = [max(int(x), 0) for x in batch.seq_lens_cpu.tolist()]
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DRAFT_EXTEND_V2
    )
    forward_batch = ForwardBatch.init_new(
        batch,
        draft_model_runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_hidden_states_before_norm=False,
        kv_loc_plan=kv_loc_plan,
    )
    forward_batch.seq_lens = forward_batch.seq_lens + num_draft_tokens
    forward_batch.seq_lens_cpu = forward_batch.seq_lens_cpu + num_draft_tokens
    forward_batch.seq_lens_sum = int(forward_batch.seq_lens_cpu.sum())
    if not batch.forward_mode.is_idle():
        draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return forward_batch


def _graph_runner_of(model_runner: ModelRunner):
    return getattr(model_runner, "decode_cuda_graph_runner", None)


# idiom: speculative/eagle_utils.py eagle_prepare_for_verify + run_eagle_verify (pre-planned target verify)
# expect: clean
def forward_target_verify_preplanned(
    target_runner: ModelRunner, verify_forward_batch: ForwardBatch
):
    assert verify_forward_batch.forward_mode.is_target_verify()
    graph_runner = _graph_runner_of(target_runner)
    if graph_runner is not None and graph_runner.can_run_graph(verify_forward_batch):
        graph_runner.load_batch(verify_forward_batch)
    else:
        target_runner.attn_backend.init_forward_metadata(verify_forward_batch)
    verify_forward_batch.mark_forward_metadata_ready()
    return target_runner.forward(verify_forward_batch).logits_output


# idiom: speculative/eagle_worker_common.py prepare_for_draft_extend + EagleDraftWorker._draft_extend_for_decode
# expect: SG106
def forward_draft_extend_preplanned(
    draft_runner: ModelRunner, forward_batch: ForwardBatch
):
    assert forward_batch.forward_mode.is_draft_extend_v2()
    graph_runner = _graph_runner_of(draft_runner)
    if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
        graph_runner.load_batch(forward_batch)
    else:
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return draft_runner.forward(forward_batch).logits_output


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (mark as partial)
# expect: SG106
def forward_with_partial_mark(
    draft_runner: ModelRunner, backend, forward_batch: ForwardBatch
):
    mark_ready = functools.partial(forward_batch.mark_forward_metadata_ready)
    backend.init_forward_metadata(forward_batch)
    mark_ready()
    logits_output = draft_runner.forward(forward_batch).logits_output
    return logits_output.next_token_logits, logits_output.hidden_states


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (mark as partial)
# expect: clean
def forward_with_partial_mark_replan(
    draft_runner: ModelRunner, backend, forward_batch: ForwardBatch
):
    mark_ready = functools.partial(
        forward_batch.mark_forward_metadata_ready, replan_equivalent=True
    )
    backend.init_forward_metadata(forward_batch)
    mark_ready()
    logits_output = draft_runner.forward(forward_batch).logits_output
    return logits_output.next_token_logits, logits_output.hidden_states


# idiom: sglang 0.5.6 speculative/eagle_worker_v2.py draft_forward (skip_attn_backend_init=True)
# expect: SG106
def run_preplanned_legacy(draft_runner: ModelRunner, forward_batch: ForwardBatch):
    draft_runner.attn_backend.init_forward_metadata(forward_batch)
    return draft_runner.forward(forward_batch, skip_attn_backend_init=True)


# idiom: sglang 0.5.6 speculative/eagle_worker_v2.py draft_forward (skip_attn_backend_init=True)
# expect: clean
def run_preplanned_legacy_dp_aware(
    draft_runner: ModelRunner, forward_batch: ForwardBatch, cfg: KestrelParallelConfig
):
    draft_runner.attn_backend.init_forward_metadata(forward_batch)
    return draft_runner.forward(
        forward_batch, skip_attn_backend_init=not cfg.needs_mlp_sync
    )


# idiom: managers/tp_worker.py forward_batch_generation(skip_attn_backend_init=...) via kwargs
# expect: SG106
def run_with_fwd_kwargs(draft_runner: ModelRunner, forward_batch: ForwardBatch):
    fwd_kwargs = {"skip_attn_backend_init": True}
    if not forward_batch.forward_mode.is_idle():
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
    else:
        fwd_kwargs = {}
    return draft_runner.forward(forward_batch, **fwd_kwargs).logits_output


# idiom: managers/tp_worker.py forward_batch_generation(skip_attn_backend_init=...) via kwargs
# expect: clean
def run_with_fwd_kwargs_synced(draft_runner: ModelRunner, forward_batch: ForwardBatch):
    fwd_kwargs = {}
    if not forward_batch.forward_mode.is_idle() and not require_mlp_sync():
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        fwd_kwargs["skip_attn_backend_init"] = True
    return draft_runner.forward(forward_batch, **fwd_kwargs).logits_output


# idiom: model_executor/model_runner.py _prepare_eager_forward_batch (prepare_mlp_sync_batch) before eager plan
# expect: clean
def pad_then_plan(draft_runner: ModelRunner, backend, forward_batch: ForwardBatch):
    num_real_tokens = forward_batch.input_ids.shape[0]
    pad_for_dp(forward_batch, draft_runner)
    plan_and_mark(backend, forward_batch)
    logits_output = draft_runner.forward(forward_batch).logits_output
    logits_output.next_token_logits = logits_output.next_token_logits[:num_real_tokens]
    return logits_output


# idiom: model_executor/model_runner.py _prepare_eager_forward_batch (prepare_mlp_sync_batch) before eager plan
# expect: SG106
def plan_then_pad(draft_runner: ModelRunner, backend, forward_batch: ForwardBatch):
    num_real_tokens = forward_batch.input_ids.shape[0]
    plan_and_mark(backend, forward_batch)
    pad_for_dp(forward_batch, draft_runner)
    logits_output = draft_runner.forward(forward_batch).logits_output
    logits_output.next_token_logits = logits_output.next_token_logits[:num_real_tokens]
    return logits_output


# idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (helper returns the planned batch)
# expect: SG106
def draft_extend_from_helper(
    worker,
    batch: ScheduleBatch,
    draft_extend_input: EagleDraftExtendInput,
    next_token_ids: torch.Tensor,
):
    forward_batch = kestrel_prepare_for_draft_extend(
        draft_extend_input,
        batch,
        next_token_ids,
        worker.speculative_num_draft_tokens,
        worker.draft_runner,
    )
    return worker.draft_runner.forward(forward_batch).logits_output


# idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (helper returns the planned batch)
# expect: clean
def draft_extend_from_helper_replan(
    worker,
    batch: ScheduleBatch,
    draft_extend_input: EagleDraftExtendInput,
    next_token_ids: torch.Tensor,
):
    forward_batch = kestrel_prepare_for_draft_extend(
        draft_extend_input,
        batch,
        next_token_ids,
        worker.speculative_num_draft_tokens,
        worker.draft_runner,
        replan_equivalent=dp_attention_active(worker.server_args),
    )
    return worker.draft_runner.forward(forward_batch).logits_output


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft_forward (per-step backends loop)
# expect: SG106
def step_loop(
    draft_runner: ModelRunner,
    step_backends: Sequence[Any],
    forward_batch: ForwardBatch,
    step_input_ids: List[torch.Tensor],
):
    outputs = []
    for i, backend in enumerate(step_backends):
        forward_batch.input_ids = step_input_ids[i]
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        outputs.append(draft_runner.forward(forward_batch).logits_output)
    return outputs


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft_forward (per-step backends loop)
# expect: clean
def step_loop_synced(
    draft_runner: ModelRunner,
    step_backends: Sequence[Any],
    forward_batch: ForwardBatch,
    step_input_ids: List[torch.Tensor],
):
    outputs = []
    replan = require_mlp_sync()
    for i, backend in enumerate(step_backends):
        forward_batch.input_ids = step_input_ids[i]
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=replan)
        outputs.append(draft_runner.forward(forward_batch).logits_output)
    return outputs
