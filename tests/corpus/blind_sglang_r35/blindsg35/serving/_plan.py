"""Small module-level helpers shared by the draft strategies (unlabelled)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.eagle_info import EagleDraftExtendInput


def is_dp_padded(forward_batch: ForwardBatch) -> bool:
    """Whether ModelRunner._forward_raw will pad this batch.

    ``_prepare_eager_forward_batch`` runs ``prepare_mlp_sync_batch`` exactly
    when the batch carries global token counts (DP attention / MLP sync).
    """
    return forward_batch.global_num_tokens_cpu is not None


def draft_extend_select_index(
    accept_lens: torch.Tensor, num_draft_tokens: int, device
) -> torch.Tensor:
    bs = accept_lens.shape[0]
    return (
        torch.arange(0, bs * num_draft_tokens, num_draft_tokens, device=device)
        + accept_lens
        - 1
    )


def build_draft_extend_batch(
    draft_extend_input: "EagleDraftExtendInput",
    batch: "ScheduleBatch",
    predict: torch.Tensor,
    num_draft_tokens: int,
    draft_model_runner: "ModelRunner",
    *,
    kv_loc_plan: Optional["KVLocPlan"] = None,
) -> ForwardBatch:
    """Trimmed fork of ``prepare_for_draft_extend`` that never plans.

    Planning is left to the caller (or to the forward, post-pad).
    """
    bs = len(batch.seq_lens)
    batch.spec_info = draft_extend_input
    batch.input_ids = predict
    if batch.seq_lens_cpu is None:
        batch.prefix_lens = batch.seq_lens.to(torch.int32)
        batch.extend_lens = torch.full(
            (bs,), num_draft_tokens, dtype=torch.int32, device=batch.seq_lens.device
        )
    else:
        batch.prefix_lens = batch.seq_lens_cpu.tolist()
        batch.extend_lens = [num_draft_tokens] * bs
    batch.extend_num_tokens = bs * num_draft_tokens
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DRAFT_EXTEND_V2
    )
    capture_mode = (
        CaptureHiddenMode.NULL
        if draft_model_runner.spec_algorithm.is_standalone()
        else CaptureHiddenMode.FULL
    )
    forward_batch = ForwardBatch.init_new(
        batch,
        draft_model_runner,
        capture_hidden_mode=capture_mode,
        return_hidden_states_before_norm=False,
        kv_loc_plan=kv_loc_plan,
    )
    forward_batch.seq_lens = forward_batch.seq_lens + num_draft_tokens
    if batch.seq_lens_cpu is not None:
        forward_batch.seq_lens_cpu = forward_batch.seq_lens_cpu + num_draft_tokens
        forward_batch.seq_lens_sum = int(forward_batch.seq_lens_cpu.sum())
    else:
        forward_batch.extend_seq_lens_cpu = [num_draft_tokens] * bs
    return forward_batch


def freeze_plan_record(forward_batch: ForwardBatch) -> None:
    """Pin the pre-plan: the forward must use it as-is (no post-pad re-plan)."""
    forward_batch.forward_metadata_replan_equivalent = False
