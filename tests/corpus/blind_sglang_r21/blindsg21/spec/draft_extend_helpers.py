"""Eager draft-extend plumbing shared by the fork's EAGLE-family workers.

The builders here only construct the DRAFT_EXTEND_V2 ``ForwardBatch``; they
never plan attention metadata.  Planning policy is left to the callers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Iterator, List, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput


def build_draft_extend_input(
    batch_result: GenerationBatchResult, num_draft_tokens: int
) -> EagleDraftExtendInput:
    accept_lens = batch_result.accept_lens
    return EagleDraftExtendInput(
        hidden_states=batch_result.logits_output.hidden_states,
        num_correct_drafts=accept_lens - 1,
        num_accept_tokens=accept_lens,
        num_tokens_per_req=num_draft_tokens,
        num_tokens_for_logprob_per_req=num_draft_tokens,
    )


def build_draft_extend_forward_batch(
    batch: ScheduleBatch,
    draft_extend_input: EagleDraftExtendInput,
    predict: torch.Tensor,
    num_draft_tokens: int,
    draft_runner,
    *,
    kv_loc_plan=None,
) -> ForwardBatch:
    """DRAFT_EXTEND_V2 batch over the verify window; metadata left unplanned."""
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
    forward_batch = ForwardBatch.init_new(
        batch,
        draft_runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_hidden_states_before_norm=False,
        kv_loc_plan=kv_loc_plan,
    )
    # The forward sees the post-write length; the ScheduleBatch keeps its own.
    forward_batch.seq_lens = forward_batch.seq_lens + num_draft_tokens
    if forward_batch.seq_lens_cpu is not None:
        forward_batch.seq_lens_cpu = forward_batch.seq_lens_cpu + num_draft_tokens
        forward_batch.seq_lens_sum = int(forward_batch.seq_lens_cpu.sum())
    else:
        forward_batch.extend_seq_lens_cpu = [num_draft_tokens] * bs
    return forward_batch


def last_accepted_index(batch_result: GenerationBatchResult, num_draft_tokens: int):
    accept_lens = batch_result.accept_lens
    bs = accept_lens.shape[0]
    return (
        torch.arange(bs, device=accept_lens.device) * num_draft_tokens
        + accept_lens
        - 1
    )


# expect: SG106
def forward_draft_extend_with_plan_stream(worker, forward_batch: ForwardBatch):
    """Plan on the worker's plan stream, join, then run the eager draft extend."""
    runner = worker.draft_runner
    device_mod = torch.get_device_module(worker.device)
    if worker.plan_stream:
        worker.plan_stream.wait_stream(device_mod.current_stream())
    with worker.plan_stream_ctx:
        if not forward_batch.forward_mode.is_idle():
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
    if worker.plan_stream:
        device_mod.current_stream().wait_stream(worker.plan_stream)
    return runner.forward(forward_batch).logits_output


# expect: SG106
def run_with_partial_plan(draft_runner, forward_batch: ForwardBatch):
    """Bind the plan/mark pair once so the caller's retry loop can reuse it."""
    plan = partial(draft_runner.attn_backend.init_forward_metadata, forward_batch)
    mark = partial(forward_batch.mark_forward_metadata_ready)
    for action in (plan, mark):
        action()
    return draft_runner.forward(forward_batch).logits_output


# expect: clean
def run_with_partial_replannable_plan(draft_runner, forward_batch: ForwardBatch):
    """Same as :func:`run_with_partial_plan` but the mark lets the runner
    re-plan once DP padding changed the batch (same backend object, so the
    runner's re-plan is equivalent)."""
    plan = partial(draft_runner.attn_backend.init_forward_metadata, forward_batch)
    mark = partial(forward_batch.mark_forward_metadata_ready, replan_equivalent=True)
    for action in (plan, mark):
        action()
    return draft_runner.forward(forward_batch).logits_output


@dataclass
class PlannedDraftBatch:
    """A draft-extend batch bundled with the backend that plans it."""

    forward_batch: ForwardBatch
    attn_backend: Any
    select_index: Optional[torch.Tensor] = None
    planned: bool = field(default=False, init=False)

    def plan(self) -> None:
        if self.forward_batch.forward_mode.is_idle() or self.planned:
            return
        self.attn_backend.init_forward_metadata(self.forward_batch)
        self.forward_batch.mark_forward_metadata_ready()
        self.planned = True

    # expect: SG106
    def execute(self, draft_runner):
        self.plan()
        out = draft_runner.forward(self.forward_batch).logits_output
        if self.select_index is not None:
            out.next_token_logits = out.next_token_logits[self.select_index]
        return out


@dataclass
class ReplannableDraftBatch:
    """Like :class:`PlannedDraftBatch`, but only for the runner's own backend,
    whose forward-path re-plan is equivalent to the pre-plan."""

    forward_batch: ForwardBatch
    select_index: Optional[torch.Tensor] = None

    # expect: clean
    def execute(self, draft_runner):
        fb = self.forward_batch
        if not fb.forward_mode.is_idle():
            draft_runner.attn_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready(replan_equivalent=True)
        out = draft_runner.forward(fb).logits_output
        if self.select_index is not None:
            out.next_token_logits = out.next_token_logits[self.select_index]
        return out


def iter_draft_extend_windows(
    batch: ScheduleBatch,
    batch_result: GenerationBatchResult,
    num_draft_tokens: int,
    window: int,
    draft_runner,
) -> Iterator[ForwardBatch]:
    """Split a wide verify window into narrower draft-extend forwards.

    Each yielded batch extends every request by ``<= window`` tokens starting
    where the previous one stopped.
    """
    bs = len(batch.seq_lens)
    ids = batch_result.next_token_ids.view(bs, num_draft_tokens)
    hidden = batch_result.logits_output.hidden_states
    hidden = hidden.view(bs, num_draft_tokens, hidden.shape[-1])
    base_seq_lens = batch.seq_lens
    try:
        for start in range(0, num_draft_tokens, window):
            width = min(window, num_draft_tokens - start)
            extend_input = EagleDraftExtendInput(
                hidden_states=hidden[:, start : start + width].reshape(bs * width, -1),
                num_tokens_per_req=width,
                num_tokens_for_logprob_per_req=width,
            )
            batch.seq_lens = base_seq_lens + start
            yield build_draft_extend_forward_batch(
                batch,
                extend_input,
                ids[:, start : start + width].reshape(-1),
                width,
                draft_runner,
            )
    finally:
        batch.seq_lens = base_seq_lens


# expect: SG106
def run_draft_extend_windows(worker, batch, batch_result, window: int):
    runner = worker.draft_runner
    outputs: List[Any] = []
    for forward_batch in iter_draft_extend_windows(
        batch, batch_result, worker.speculative_num_draft_tokens, window, runner
    ):
        if not forward_batch.forward_mode.is_idle():
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        outputs.append(runner.forward(forward_batch).logits_output)
    return outputs


# expect: clean
def run_draft_extend_windows_dp_safe(worker, batch, batch_result, window: int):
    runner = worker.draft_runner
    outputs: List[Any] = []
    for forward_batch in iter_draft_extend_windows(
        batch, batch_result, worker.speculative_num_draft_tokens, window, runner
    ):
        # A window that goes through the MLP-sync pass is padded inside
        # forward(); leave it unplanned so the runner plans the padded shape.
        if (
            not forward_batch.forward_mode.is_idle()
            and forward_batch.global_num_tokens_cpu is None
        ):
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        outputs.append(runner.forward(forward_batch).logits_output)
    return outputs
