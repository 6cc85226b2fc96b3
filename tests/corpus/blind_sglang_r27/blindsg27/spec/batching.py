"""Batch building / planning helpers of the lookahead method."""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

from blindsg27.runtime.eager import dp_padding_expected


def preplan(attn_backend, forward_batch: ForwardBatch, *, replan_equivalent: bool = False) -> bool:
    """Plan ``forward_batch`` outside the forward and mark it planned."""
    if forward_batch.forward_mode.is_idle():
        return False
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return True


class PreplannedBatch:
    """``with PreplannedBatch(backend, fb): ...`` plans and marks on entry."""

    def __init__(self, attn_backend, forward_batch: ForwardBatch, *, replan_equivalent: bool = False):
        self.attn_backend = attn_backend
        self.forward_batch = forward_batch
        self.replan_equivalent = replan_equivalent

    def __enter__(self) -> ForwardBatch:
        if not self.forward_batch.forward_mode.is_idle():
            self.attn_backend.init_forward_metadata(self.forward_batch)
            self.forward_batch.mark_forward_metadata_ready(
                replan_equivalent=self.replan_equivalent
            )
        return self.forward_batch

    def __exit__(self, exc_type, exc, tb) -> bool:
        return False


def build_draft_extend_batch(
    draft_extend_input: EagleDraftExtendInput,
    batch: ScheduleBatch,
    next_token_ids: torch.Tensor,
    num_draft_tokens: int,
    draft_runner,
    *,
    preplan_metadata: bool = True,
) -> ForwardBatch:
    """Lookahead draft extend: every request re-reads its whole verify window."""
    bs = len(batch.seq_lens)
    batch.spec_info = draft_extend_input
    batch.input_ids = next_token_ids
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
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DRAFT_EXTEND_V2
    )
    forward_batch = ForwardBatch.init_new(
        batch,
        draft_runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_hidden_states_before_norm=False,
    )
    forward_batch.seq_lens = forward_batch.seq_lens + num_draft_tokens
    if forward_batch.seq_lens_cpu is not None:
        forward_batch.seq_lens_cpu = forward_batch.seq_lens_cpu + num_draft_tokens
        forward_batch.seq_lens_sum = int(forward_batch.seq_lens_cpu.sum())
    if preplan_metadata and not batch.forward_mode.is_idle():
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return forward_batch


def run_draft_step(draft_runner, forward_batch: ForwardBatch, attn_backend):
    """One draft forward with ``attn_backend`` published in the forward context."""
    with forward_context(
        ForwardContext(attn_backend=attn_backend), forward_batch=forward_batch
    ):
        return draft_runner.forward(forward_batch).logits_output


# idiom: eagle_worker_common.prepare_for_draft_extend + EagleDraftWorker._draft_extend_for_decode (plan with the runner's own backend, mark replan_equivalent=True)
# expect: clean
def run_preplanned_draft_extend(draft_runner, forward_batch: ForwardBatch):
    if forward_batch.forward_mode.is_idle():
        return draft_runner.forward(forward_batch).logits_output
    backend = draft_runner.attn_backend
    backend.init_forward_metadata(forward_batch)
    # The forward path re-plans with this very backend, so a DP-padded
    # batch may safely be planned again.
    forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    return draft_runner.forward(forward_batch).logits_output


# idiom: eagle_worker_common.prepare_for_draft_extend (plan+mark via a context manager) then ModelRunner.forward
# expect: SG106
def run_draft_extend_with_context(draft_runner, forward_batch: ForwardBatch):
    with PreplannedBatch(draft_runner.attn_backend, forward_batch) as fb:
        logits_output = draft_runner.forward(fb).logits_output
    return logits_output


# idiom: eagle_worker_common.prepare_for_draft_extend (plan+mark via a context manager, replan_equivalent=True)
# expect: clean
def run_draft_extend_with_replannable_context(draft_runner, forward_batch: ForwardBatch):
    with PreplannedBatch(
        draft_runner.attn_backend, forward_batch, replan_equivalent=True
    ) as fb:
        logits_output = draft_runner.forward(fb).logits_output
    return logits_output


def maybe_preplan_for_local_batch(attn_backend, forward_batch: ForwardBatch) -> bool:
    """Plan ahead only when no MLP-sync padding will reshape the batch."""
    if dp_padding_expected():
        return False
    return preplan(attn_backend, forward_batch)
