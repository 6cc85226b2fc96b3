"""ForwardBatch builders for the fork's eager draft-extend paths.

Unlike ``eagle_worker_common.prepare_for_draft_extend`` these builders never
touch the attention backend: the caller decides whether and where to plan.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from sglang.kernels.ops.speculative.eagle import prepare_draft_extend_lengths
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput


def build_draft_extend_forward_batch(
    draft_runner,
    batch,
    batch_result,
    num_draft_tokens: int,
    *,
    kv_loc_plan=None,
) -> Tuple[ForwardBatch, torch.Tensor]:
    """DRAFT_EXTEND_V2 batch over the verify window plus the per-request
    select index of the last accepted row."""
    bs = len(batch.seq_lens)
    accept_lens = batch_result.accept_lens
    draft_extend_input = EagleDraftExtendInput(
        hidden_states=batch_result.logits_output.hidden_states,
        num_correct_drafts=accept_lens - 1,
        num_accept_tokens=accept_lens,
        num_tokens_per_req=num_draft_tokens,
        num_tokens_for_logprob_per_req=num_draft_tokens,
    )
    batch.spec_info = draft_extend_input
    batch.input_ids = batch_result.next_token_ids.to(torch.int64)
    batch.prefix_lens, batch.extend_lens, post_seq_lens = prepare_draft_extend_lengths(
        batch.seq_lens, num_draft_tokens, 0
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
        kv_loc_plan=kv_loc_plan,
    )
    forward_batch.seq_lens = post_seq_lens
    forward_batch.extend_seq_lens_cpu = [num_draft_tokens] * bs
    select_index = (
        torch.arange(bs, device=accept_lens.device) * num_draft_tokens + accept_lens - 1
    )
    return forward_batch, select_index


def idle_or_graph(cuda_graph_runner, forward_batch: ForwardBatch) -> Tuple[bool, bool]:
    is_idle = forward_batch.forward_mode.is_idle()
    can_run_graph = bool(
        cuda_graph_runner is not None and cuda_graph_runner.can_run_graph(forward_batch)
    )
    return is_idle, can_run_graph


def last_accepted_rows(logits_output, select_index: Optional[torch.Tensor]):
    if select_index is None:
        return logits_output
    logits_output.next_token_logits = logits_output.next_token_logits[select_index]
    if logits_output.hidden_states is not None:
        logits_output.hidden_states = logits_output.hidden_states[select_index]
    return logits_output
