"""Builds the draft-extend forward batch without planning it (the callers
decide where and when to plan)."""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput


def build_draft_extend_batch(
    draft_extend_input: EagleDraftExtendInput,
    batch: ScheduleBatch,
    predict: torch.Tensor,
    num_draft_tokens: int,
    draft_runner,
    *,
    capture_hidden_mode: CaptureHiddenMode = CaptureHiddenMode.FULL,
    kv_loc_plan: Optional[KVLocPlan] = None,
) -> ForwardBatch:
    bs = len(batch.seq_lens)
    batch.spec_info = draft_extend_input
    batch.input_ids = predict
    if batch.seq_lens_cpu is not None:
        batch.prefix_lens = batch.seq_lens_cpu.tolist()
        batch.extend_lens = [num_draft_tokens] * bs
    else:
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
        draft_runner,
        capture_hidden_mode=capture_hidden_mode,
        return_hidden_states_before_norm=False,
        kv_loc_plan=kv_loc_plan,
    )
    forward_batch.seq_lens = forward_batch.seq_lens + num_draft_tokens
    if forward_batch.seq_lens_cpu is not None:
        forward_batch.seq_lens_cpu = forward_batch.seq_lens_cpu + num_draft_tokens
        forward_batch.seq_lens_sum = int(forward_batch.seq_lens_cpu.sum())
    forward_batch.extend_seq_lens_cpu = [num_draft_tokens] * bs
    return forward_batch


def draft_extend_select_index(
    accept_lens: torch.Tensor, num_draft_tokens: int
) -> torch.Tensor:
    bs = accept_lens.shape[0]
    return (
        torch.arange(
            0, bs * num_draft_tokens, num_draft_tokens, device=accept_lens.device
        )
        + accept_lens
        - 1
    )
