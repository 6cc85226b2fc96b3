# Copyright 2023-2026 SGLang Team
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# ==============================================================================
"""Build draft forward batches and plan their attention metadata up front.

The helpers here construct the ``ForwardBatch`` objects a draft worker hands to
``ModelRunner.forward`` and, where the caller wants it, plan attention for them
on the worker side so the per-step forward does not have to.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple

import torch

from sglang.srt.layers.dp_attention import is_dp_attention_enabled
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.utils.common import require_mlp_sync

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

logger = logging.getLogger(__name__)


@dataclass
class DraftStepState:
    """Per-iteration bookkeeping for a worker-driven draft loop."""

    forward_batch: ForwardBatch
    step: int = 0
    replan_equivalent: bool = False
    logits: List[torch.Tensor] = field(default_factory=list)


@dataclass
class PlannedShape:
    batch_size: int
    num_tokens: int


def build_draft_extend_forward_batch(
    draft_extend_input: EagleDraftExtendInput,
    batch: ScheduleBatch,
    predict: torch.Tensor,
    num_draft_tokens: int,
    draft_model_runner: ModelRunner,
) -> ForwardBatch:
    """DRAFT_EXTEND_V2 batch over the verify window; attention is not planned."""
    bs = len(batch.seq_lens)
    batch.spec_info = draft_extend_input
    batch.input_ids = predict
    batch.prefix_lens = batch.seq_lens.to(torch.int32)
    batch.extend_lens = torch.full(
        (bs,), num_draft_tokens, dtype=torch.int32, device=batch.seq_lens.device
    )
    batch.extend_num_tokens = bs * num_draft_tokens
    batch.forward_mode = (
        ForwardMode.IDLE
        if batch.forward_mode.is_idle()
        else ForwardMode.DRAFT_EXTEND_V2
    )
    forward_batch = ForwardBatch.init_new(
        batch,
        draft_model_runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_hidden_states_before_norm=False,
    )
    forward_batch.seq_lens = forward_batch.seq_lens + num_draft_tokens
    forward_batch.extend_seq_lens_cpu = [num_draft_tokens] * bs
    return forward_batch


def plan_attention(
    attn_backend: AttentionBackend, forward_batch: ForwardBatch
) -> PlannedShape:
    attn_backend.init_forward_metadata(forward_batch)
    num_tokens = (
        forward_batch.input_ids.shape[0] if forward_batch.input_ids is not None else 0
    )
    return PlannedShape(forward_batch.batch_size, num_tokens)


# expect: SG106
def run_draft_extend_preplanned(
    draft_model_runner: ModelRunner, forward_batch: ForwardBatch
) -> LogitsProcessorOutput:
    if forward_batch.forward_mode.is_idle():
        return draft_model_runner.forward(forward_batch).logits_output

    shape = plan_attention(draft_model_runner.attn_backend, forward_batch)
    forward_batch.mark_forward_metadata_ready()
    logger.debug(
        "draft extend planned: bs=%d tokens=%d", shape.batch_size, shape.num_tokens
    )
    return draft_model_runner.forward(forward_batch).logits_output


# expect: clean
def run_draft_extend_with_record(
    draft_model_runner: ModelRunner, forward_batch: ForwardBatch
) -> LogitsProcessorOutput:
    if forward_batch.forward_mode.is_idle():
        return draft_model_runner.forward(forward_batch).logits_output

    shape = plan_attention(draft_model_runner.attn_backend, forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    logger.debug(
        "draft extend planned: bs=%d tokens=%d", shape.batch_size, shape.num_tokens
    )
    return draft_model_runner.forward(forward_batch).logits_output


# expect: SG106
def forward_draft_step(
    draft_model_runner: ModelRunner, forward_batch: ForwardBatch, step: int
) -> DraftStepState:
    state = DraftStepState(forward_batch=forward_batch, step=step)
    draft_model_runner.attn_backend.init_forward_metadata(state.forward_batch)
    state.forward_batch.mark_forward_metadata_ready(
        replan_equivalent=state.replan_equivalent
    )
    out = draft_model_runner.forward(state.forward_batch)
    state.logits.append(out.logits_output.next_token_logits)
    return state


# expect: clean
def forward_draft_step_tracked(
    draft_model_runner: ModelRunner, forward_batch: ForwardBatch, step: int
) -> DraftStepState:
    state = DraftStepState(
        forward_batch=forward_batch, step=step, replan_equivalent=True
    )
    draft_model_runner.attn_backend.init_forward_metadata(state.forward_batch)
    state.forward_batch.mark_forward_metadata_ready(
        replan_equivalent=state.replan_equivalent
    )
    out = draft_model_runner.forward(state.forward_batch)
    state.logits.append(out.logits_output.next_token_logits)
    return state


# expect: SG106
def iter_draft_step_logits(
    draft_model_runner: ModelRunner, forward_batch: ForwardBatch, num_steps: int
) -> Iterator[Tuple[int, LogitsProcessorOutput]]:
    for step in range(num_steps):
        draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        out = draft_model_runner.forward(forward_batch)
        yield step, out.logits_output
        forward_batch.positions.add_(1)


# expect: clean
def iter_draft_step_outputs(
    draft_model_runner: ModelRunner, forward_batch: ForwardBatch, num_steps: int
) -> Iterator[Tuple[int, LogitsProcessorOutput]]:
    for step in range(num_steps):
        if not forward_batch.forward_mode.is_idle():
            draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        out = draft_model_runner.forward(forward_batch)
        yield step, out.logits_output
        forward_batch.positions.add_(1)


# expect: SG106
def run_draft_decode_partial(
    draft_model_runner: ModelRunner,
    forward_batch: ForwardBatch,
    attn_backend: AttentionBackend,
):
    plan = functools.partial(attn_backend.init_forward_metadata, forward_batch)
    mark = functools.partial(forward_batch.mark_forward_metadata_ready)
    run = functools.partial(draft_model_runner.forward, forward_batch)
    plan()
    mark()
    return run().logits_output


# expect: clean
def run_draft_decode_bound(
    draft_model_runner: ModelRunner, forward_batch: ForwardBatch
):
    plan = functools.partial(
        draft_model_runner.attn_backend.init_forward_metadata, forward_batch
    )
    mark = functools.partial(
        forward_batch.mark_forward_metadata_ready, replan_equivalent=True
    )
    run = functools.partial(draft_model_runner.forward, forward_batch)
    plan()
    mark()
    return run().logits_output


# expect: clean
def run_preplanned_draft(
    draft_model_runner: ModelRunner, forward_batch: ForwardBatch
):
    if not require_mlp_sync() and not forward_batch.forward_mode.is_idle():
        draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return draft_model_runner.forward(forward_batch).logits_output


# expect: SG106
def run_preplanned_collective(
    draft_model_runner: ModelRunner, forward_batch: ForwardBatch
):
    # Every attention-DP rank enters the forward collectively; plan here so
    # the per-rank forward does not stall on metadata construction.
    if is_dp_attention_enabled() and not forward_batch.forward_mode.is_idle():
        draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return draft_model_runner.forward(forward_batch).logits_output


# expect: SG106
def forward_or_idle(
    draft_model_runner: ModelRunner,
    forward_batch: ForwardBatch,
    attn_backend: Optional[AttentionBackend] = None,
):
    if forward_batch.forward_mode.is_idle():
        return draft_model_runner.forward(forward_batch)
    if forward_batch.batch_size == 0:
        return None
    backend = attn_backend if attn_backend is not None else draft_model_runner.attn_backend
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    with forward_context(
        ForwardContext(attn_backend=backend), forward_batch=forward_batch
    ):
        return draft_model_runner.forward(forward_batch)


# expect: clean
def forward_unless_idle(
    draft_model_runner: ModelRunner,
    forward_batch: ForwardBatch,
    attn_backend: Optional[AttentionBackend] = None,
):
    if forward_batch.forward_mode.is_idle() or require_mlp_sync():
        return draft_model_runner.forward(forward_batch)
    backend = attn_backend if attn_backend is not None else draft_model_runner.attn_backend
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    with forward_context(
        ForwardContext(attn_backend=backend), forward_batch=forward_batch
    ):
        return draft_model_runner.forward(forward_batch)


# expect: clean
def forward_draft_step_synced(
    draft_model_runner: ModelRunner, forward_batch: ForwardBatch, step: int
) -> DraftStepState:
    state = DraftStepState(forward_batch=forward_batch, step=step)
    plan_attention(draft_model_runner.attn_backend, state.forward_batch)
    state.forward_batch.mark_forward_metadata_ready()
    if state.forward_batch.global_num_tokens_cpu is not None:
        state.forward_batch.forward_metadata_ready = False
    out = draft_model_runner.forward(state.forward_batch)
    state.logits.append(out.logits_output.next_token_logits)
    return state
