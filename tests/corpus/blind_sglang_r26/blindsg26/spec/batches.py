"""Builders for draft-side ForwardBatches (never planned here)."""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput


def draft_extend_select_index(
    batch: ScheduleBatch, accept_lens: torch.Tensor, num_draft_tokens: int, device
) -> torch.Tensor:
    """Row of the last accepted token of every request in the draft-extend output."""
    return (
        torch.arange(0, len(batch.seq_lens) * num_draft_tokens, num_draft_tokens, device=device)
        + accept_lens
        - 1
    )


def init_draft_extend_batch(
    draft_runner,
    batch: ScheduleBatch,
    batch_result,
    num_draft_tokens: int,
    device,
    *,
    capture_hidden_mode: CaptureHiddenMode = CaptureHiddenMode.FULL,
    kv_loc_plan=None,
) -> Tuple[ForwardBatch, torch.Tensor]:
    """DRAFT_EXTEND_V2 batch over the verify window (num_draft_tokens per request).

    Mirrors eagle_worker_common.prepare_for_draft_extend without its
    attention planning: callers decide whether / how to plan.
    """
    ndt = num_draft_tokens
    select_index = draft_extend_select_index(batch, batch_result.accept_lens, ndt, device)
    batch.spec_info = EagleDraftExtendInput(
        hidden_states=batch_result.logits_output.hidden_states,
        num_correct_drafts=batch_result.accept_lens - 1,
        num_accept_tokens=batch_result.accept_lens,
        num_tokens_per_req=ndt,
        num_tokens_for_logprob_per_req=ndt,
    )
    bs = len(batch.seq_lens)
    batch.input_ids = batch_result.next_token_ids.to(torch.int64)
    batch.prefix_lens = batch.seq_lens.to(torch.int32)
    batch.extend_lens = torch.full((bs,), ndt, dtype=torch.int32, device=batch.seq_lens.device)
    batch.extend_num_tokens = bs * ndt
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DRAFT_EXTEND_V2
    )
    forward_batch = ForwardBatch.init_new(
        batch,
        draft_runner,
        capture_hidden_mode=capture_hidden_mode,
        return_hidden_states_before_norm=False,
        kv_loc_plan=kv_loc_plan,
    )
    forward_batch.seq_lens = forward_batch.seq_lens + ndt
    forward_batch.extend_seq_lens_cpu = [ndt] * bs
    return forward_batch, select_index
