"""Shared planning helpers for the draft services."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.utils.common import require_mlp_sync


@dataclass
class DraftPlanPolicy:
    """How a pre-planned draft batch is handed to ModelRunner.forward."""

    replan_equivalent: bool = False
    plan_idle: bool = False

    def mark_kwargs(self) -> Dict[str, Any]:
        return {"replan_equivalent": self.replan_equivalent}


def plan_and_mark(
    attn_backend, forward_batch: ForwardBatch, *, replan: bool = False
) -> ForwardBatch:
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan)
    return forward_batch


def pad_for_mlp_sync(model_runner, forward_batch: ForwardBatch) -> ForwardBatch:
    # Same gate ModelRunner._prepare_eager_forward_batch uses.
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(model_runner)
    return forward_batch


def run_draft_runner(model_runner, forward_batch: ForwardBatch):
    return model_runner.forward(forward_batch).logits_output


def dp_attention_active() -> bool:
    return get_parallel().attn_dp_enabled


def reject_dp_attention(feature: str) -> None:
    if require_mlp_sync():
        raise NotImplementedError(
            f"{feature} is not supported with DP attention / MLP sync; "
            "disable --enable-dp-attention for this draft algorithm"
        )


def replan_kwargs_for(forward_batch: ForwardBatch) -> Dict[str, Any]:
    """Mark kwargs for a batch that may still be reshaped by MLP sync."""
    return {"replan_equivalent": forward_batch.global_num_tokens_cpu is not None}


def _build_draft_extend_batch(
    batch: ScheduleBatch,
    draft_runner,
    hidden_states: torch.Tensor,
    predict: torch.Tensor,
    num_draft_tokens: int,
) -> ForwardBatch:
    bs = len(batch.seq_lens)
    batch.spec_info = EagleDraftExtendInput(
        hidden_states=hidden_states,
        num_tokens_per_req=num_draft_tokens,
        num_tokens_for_logprob_per_req=num_draft_tokens,
    )
    batch.input_ids = predict
    batch.prefix_lens = batch.seq_lens.to(torch.int32)
    batch.extend_lens = torch.full(
        (bs,), num_draft_tokens, dtype=torch.int32, device=batch.seq_lens.device
    )
    batch.extend_num_tokens = bs * num_draft_tokens
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DRAFT_EXTEND_V2
    )
    forward_batch = ForwardBatch.init_new(
        batch,
        draft_runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_hidden_states_before_norm=False,
    )
    forward_batch.seq_lens = forward_batch.seq_lens + num_draft_tokens
    forward_batch.extend_seq_lens_cpu = [num_draft_tokens] * bs
    return forward_batch


def build_planned_draft_extend(
    batch: ScheduleBatch,
    draft_runner,
    hidden_states: torch.Tensor,
    predict: torch.Tensor,
    num_draft_tokens: int,
) -> ForwardBatch:
    forward_batch = _build_draft_extend_batch(
        batch, draft_runner, hidden_states, predict, num_draft_tokens
    )
    if not forward_batch.forward_mode.is_idle():
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return forward_batch


def build_padded_planned_draft_extend(
    batch: ScheduleBatch,
    draft_runner,
    hidden_states: torch.Tensor,
    predict: torch.Tensor,
    num_draft_tokens: int,
) -> ForwardBatch:
    forward_batch = _build_draft_extend_batch(
        batch, draft_runner, hidden_states, predict, num_draft_tokens
    )
    pad_for_mlp_sync(draft_runner, forward_batch)
    if not forward_batch.forward_mode.is_idle():
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return forward_batch


def last_hidden(
    hidden_states: Optional[torch.Tensor], select_index: torch.Tensor
) -> Optional[torch.Tensor]:
    if hidden_states is None:
        return None
    return hidden_states[select_index]
