"""ForwardBatch builders for the fork's eager speculative paths.

These only lay the batch out; none of them plans attention metadata, so the
returned batch is unplanned (``needs_forward_metadata_init()`` is True).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.scheduler import GenerationBatchResult
    from sglang.srt.model_executor.model_runner import ModelRunner


def build_eager_draft_extend_batch(
    batch: ScheduleBatch,
    batch_result: GenerationBatchResult,
    draft_runner: ModelRunner,
    num_draft_tokens: int,
    *,
    capture_hidden_mode: CaptureHiddenMode = CaptureHiddenMode.FULL,
) -> ForwardBatch:
    """Draft-extend batch over the verify window (``num_draft_tokens`` rows/req)."""
    bs = len(batch.seq_lens)
    accept_lens = batch_result.accept_lens
    batch.spec_info = EagleDraftExtendInput(
        hidden_states=batch_result.logits_output.hidden_states,
        num_correct_drafts=accept_lens - 1,
        num_accept_tokens=accept_lens,
        num_tokens_per_req=num_draft_tokens,
        num_tokens_for_logprob_per_req=num_draft_tokens,
    )
    batch.input_ids = batch_result.next_token_ids
    if not batch.forward_mode.is_idle():
        batch.prefix_lens = [int(x) for x in batch.seq_lens_cpu.tolist()]
        batch.extend_lens = [num_draft_tokens] * bs
        batch.extend_num_tokens = bs * num_draft_tokens
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DRAFT_EXTEND_V2
    )
    forward_batch = ForwardBatch.init_new(
        batch,
        draft_runner,
        capture_hidden_mode=capture_hidden_mode,
        return_hidden_states_before_norm=False,
    )
    # The forward sees post-write lengths; the ScheduleBatch keeps its own.
    forward_batch.seq_lens = forward_batch.seq_lens + num_draft_tokens
    if forward_batch.seq_lens_cpu is not None:
        forward_batch.seq_lens_cpu = forward_batch.seq_lens_cpu + num_draft_tokens
        forward_batch.seq_lens_sum = int(forward_batch.seq_lens_cpu.sum())
    return forward_batch


def select_last_accepted(
    logits_output, accept_lens: torch.Tensor, num_draft_tokens: int
):
    """Keep each request's last accepted row of a draft-extend output."""
    bs = accept_lens.shape[0]
    select_index = (
        torch.arange(0, bs * num_draft_tokens, num_draft_tokens, device=accept_lens.device)
        + accept_lens
        - 1
    )
    logits_output.next_token_logits = logits_output.next_token_logits[select_index]
    if logits_output.hidden_states is not None:
        logits_output.hidden_states = logits_output.hidden_states[select_index]
    return logits_output


def target_decode_batch(
    batch: ScheduleBatch, target_runner: ModelRunner
) -> Optional[ForwardBatch]:
    """Plain DECODE batch for the target model (speculation paused)."""
    batch.spec_info = None
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DECODE
    )
    return ForwardBatch.init_new(
        batch,
        target_runner,
        capture_hidden_mode=CaptureHiddenMode.NULL,
        return_hidden_states_before_norm=False,
    )


def build_draft_refill_batch(
    batch: ScheduleBatch,
    draft_runner: ModelRunner,
    hidden_states: Optional[torch.Tensor],
) -> ForwardBatch:
    """EXTEND batch that re-runs the draft over tokens whose draft KV was
    evicted while the target KV survived (HiCache reload, see fork docs)."""
    batch.spec_info = EagleDraftExtendInput(
        hidden_states=hidden_states,
        num_tokens_per_req=1,
        num_tokens_for_logprob_per_req=1,
    )
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.EXTEND
    )
    return ForwardBatch.init_new(
        batch,
        draft_runner,
        capture_hidden_mode=CaptureHiddenMode.LAST,
        return_hidden_states_before_norm=False,
    )
