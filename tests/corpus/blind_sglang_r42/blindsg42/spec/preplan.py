"""Draft-extend batch builders used by the fork's EAGLE/MTP workers.

Upstream ``prepare_for_draft_extend`` (eagle_worker_common) builds the batch,
plans it and marks it in one call. The fork splits those steps so each worker
can decide where planning happens; these builders return the batch together
with what the caller needs to finish the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Tuple

import torch

from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.spec_utils import renorm_draft_probs
from sglang.srt.utils.common import fast_topk, require_mlp_sync

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.model_executor.model_runner import ModelRunner


def draft_extend_select_index(
    batch: "ScheduleBatch",
    accept_lens: torch.Tensor,
    num_draft_tokens: int,
    device: str,
) -> torch.Tensor:
    """Last accepted position of each request inside the draft-extend window."""
    return (
        torch.arange(
            0,
            len(batch.seq_lens) * num_draft_tokens,
            num_draft_tokens,
            device=device,
        )
        + accept_lens
        - 1
    )


def build_draft_extend_forward_batch(
    batch: "ScheduleBatch",
    draft_runner: "ModelRunner",
    batch_result: "GenerationBatchResult",
    num_draft_tokens: int,
) -> ForwardBatch:
    """Build the DRAFT_EXTEND_V2 forward batch; does not plan attention."""
    bs = len(batch.seq_lens)
    accept_lens = batch_result.accept_lens
    batch.spec_info = EagleDraftExtendInput(
        hidden_states=batch_result.logits_output.hidden_states,
        num_correct_drafts=accept_lens - 1,
        num_accept_tokens=accept_lens,
        num_tokens_per_req=num_draft_tokens,
        num_tokens_for_logprob_per_req=num_draft_tokens,
    )
    batch.input_ids = batch_result.next_token_ids.to(torch.int64)
    if batch.seq_lens_cpu is not None:
        batch.prefix_lens = [int(x) for x in batch.seq_lens_cpu.tolist()]
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
    capture_mode = (
        CaptureHiddenMode.NULL
        if draft_runner.spec_algorithm.is_standalone()
        else CaptureHiddenMode.FULL
    )
    forward_batch = ForwardBatch.init_new(
        batch,
        draft_runner,
        capture_hidden_mode=capture_mode,
        return_hidden_states_before_norm=False,
    )
    # Forward sees the post-write length; ScheduleBatch.seq_lens is untouched.
    forward_batch.seq_lens = forward_batch.seq_lens + num_draft_tokens
    if forward_batch.seq_lens_cpu is not None:
        forward_batch.seq_lens_cpu = forward_batch.seq_lens_cpu + num_draft_tokens
        forward_batch.seq_lens_sum = int(forward_batch.seq_lens_cpu.sum())
    else:
        forward_batch.extend_seq_lens_cpu = [num_draft_tokens] * bs
    return forward_batch


def finish_draft_extend(
    batch: "ScheduleBatch",
    batch_result: "GenerationBatchResult",
    logits_output,
    select_index: torch.Tensor,
    *,
    topk: int,
    ran_cuda_graph: bool,
) -> None:
    """Select the per-request rows and seed the next round's draft input."""
    if not ran_cuda_graph:
        logits_output.next_token_logits = logits_output.next_token_logits[
            select_index
        ]
        if logits_output.hidden_states is not None:
            logits_output.hidden_states = logits_output.hidden_states[select_index]
    probs = renorm_draft_probs(
        logits_output.next_token_logits, batch.sampling_info, False
    )
    topk_p, topk_index = fast_topk(probs, topk, dim=-1)
    next_draft_input = batch_result.next_draft_input
    next_draft_input.topk_p = topk_p
    next_draft_input.topk_index = topk_index
    next_draft_input.hidden_states = logits_output.hidden_states


def plan_draft_extend_batch(
    batch: "ScheduleBatch",
    draft_runner: "ModelRunner",
    batch_result: "GenerationBatchResult",
    num_draft_tokens: int,
    graph_runner,
) -> Tuple[ForwardBatch, bool]:
    """Build the draft-extend batch and plan it on the plan stream.

    Returns ``(forward_batch, can_run_cuda_graph)``. When the graph cannot run,
    the batch comes back planned against the draft runner's backend and
    marked, so the compute-stream forward does not plan it a second time.
    """
    forward_batch = build_draft_extend_forward_batch(
        batch, draft_runner, batch_result, num_draft_tokens
    )
    can_run_cuda_graph = bool(
        graph_runner is not None and graph_runner.can_run_graph(forward_batch)
    )
    if not forward_batch.forward_mode.is_idle() and not can_run_cuda_graph:
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return forward_batch, can_run_cuda_graph


def plan_draft_extend_batch_rank_local(
    batch: "ScheduleBatch",
    draft_runner: "ModelRunner",
    batch_result: "GenerationBatchResult",
    num_draft_tokens: int,
    graph_runner,
) -> Tuple[ForwardBatch, bool, bool]:
    """Like ``plan_draft_extend_batch`` but records the plan only when the
    batch cannot be reshaped by MLP-sync padding before the forward.

    Returns ``(forward_batch, can_run_cuda_graph, marked)``.
    """
    forward_batch = build_draft_extend_forward_batch(
        batch, draft_runner, batch_result, num_draft_tokens
    )
    can_run_cuda_graph = bool(
        graph_runner is not None and graph_runner.can_run_graph(forward_batch)
    )
    marked = False
    if not forward_batch.forward_mode.is_idle() and not can_run_cuda_graph:
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        if forward_batch.global_num_tokens_cpu is None and not require_mlp_sync():
            forward_batch.mark_forward_metadata_ready()
            marked = True
    return forward_batch, can_run_cuda_graph, marked


@dataclass
class PlannedExtend:
    """A draft-extend batch together with the facts of its plan."""

    forward_batch: ForwardBatch
    select_index: torch.Tensor
    can_run_cuda_graph: bool
    replan_equivalent: bool
    planned_bs: Optional[int] = None


def build_planned_extend(
    batch: "ScheduleBatch",
    draft_runner: "ModelRunner",
    batch_result: "GenerationBatchResult",
    num_draft_tokens: int,
    graph_runner,
    device: str,
    *,
    replan_equivalent: bool,
) -> PlannedExtend:
    select_index = draft_extend_select_index(
        batch, batch_result.accept_lens, num_draft_tokens, device
    )
    forward_batch = build_draft_extend_forward_batch(
        batch, draft_runner, batch_result, num_draft_tokens
    )
    can_run_cuda_graph = bool(
        graph_runner is not None and graph_runner.can_run_graph(forward_batch)
    )
    planned_bs = None
    if not forward_batch.forward_mode.is_idle() and not can_run_cuda_graph:
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
        planned_bs = forward_batch.batch_size
    return PlannedExtend(
        forward_batch=forward_batch,
        select_index=select_index,
        can_run_cuda_graph=can_run_cuda_graph,
        replan_equivalent=replan_equivalent,
        planned_bs=planned_bs,
    )
