"""Planning helpers. They plan (and some mark) a ForwardBatch; running it is
left to the workers in the other modules."""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Optional, Tuple

import torch

from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.utils.common import require_mlp_sync


def preplan(backend: AttentionBackend, forward_batch: ForwardBatch) -> None:
    """Plan only; the batch stays unmarked so the forward decides."""
    if forward_batch.forward_mode.is_idle():
        return
    backend.init_forward_metadata(forward_batch)


def preplan_and_mark(
    backend: AttentionBackend,
    forward_batch: ForwardBatch,
    *,
    replan_equivalent: bool = False,
) -> ForwardBatch:
    """Plan and record the plan on the batch (mark_forward_metadata_ready)."""
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return forward_batch


def _init_draft_extend_batch(
    draft_extend_input: EagleDraftExtendInput,
    batch: ScheduleBatch,
    next_token_ids: torch.Tensor,
    num_draft_tokens: int,
    draft_runner: ModelRunner,
) -> ForwardBatch:
    bs = len(batch.seq_lens)
    batch.spec_info = draft_extend_input
    batch.input_ids = next_token_ids
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


def build_planned_draft_extend_batch(
    draft_extend_input: EagleDraftExtendInput,
    batch: ScheduleBatch,
    next_token_ids: torch.Tensor,
    num_draft_tokens: int,
    draft_runner: ModelRunner,
    cuda_graph_runner,
) -> ForwardBatch:
    """Mirror of eagle_worker_common.prepare_for_draft_extend: the eager path is
    planned on the plan stream and marked ready before the batch leaves here."""
    forward_batch = _init_draft_extend_batch(
        draft_extend_input, batch, next_token_ids, num_draft_tokens, draft_runner
    )
    can_run_graph = cuda_graph_runner and cuda_graph_runner.can_run_graph(
        forward_batch
    )
    if not batch.forward_mode.is_idle() and not can_run_graph:
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return forward_batch


def build_draft_extend_batch_for_graph(
    draft_extend_input: EagleDraftExtendInput,
    batch: ScheduleBatch,
    next_token_ids: torch.Tensor,
    num_draft_tokens: int,
    draft_runner: ModelRunner,
    cuda_graph_runner,
) -> Tuple[ForwardBatch, bool]:
    """Only the graph path is pre-planned (load_batch pads to the captured
    bucket itself); the eager path is handed back unplanned."""
    forward_batch = _init_draft_extend_batch(
        draft_extend_input, batch, next_token_ids, num_draft_tokens, draft_runner
    )
    can_run_graph = bool(
        cuda_graph_runner and cuda_graph_runner.can_run_graph(forward_batch)
    )
    if can_run_graph and not batch.forward_mode.is_idle():
        cuda_graph_runner.load_batch(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return forward_batch, can_run_graph


def plan_unless_mlp_sync(
    backend: AttentionBackend, forward_batch: ForwardBatch
) -> Tuple[ForwardBatch, bool]:
    """Plan early only when no MLP-sync padding can follow; report whether the
    plan is final."""
    if forward_batch.forward_mode.is_idle() or require_mlp_sync():
        return forward_batch, False
    backend.init_forward_metadata(forward_batch)
    return forward_batch, True


def plan_for_overlap(
    backend: AttentionBackend, forward_batch: ForwardBatch
) -> Tuple[ForwardBatch, bool]:
    """Plan early for the overlap scheduler; the plan is 'final' whenever the
    batch is non-idle."""
    if forward_batch.forward_mode.is_idle():
        return forward_batch, False
    backend.init_forward_metadata(forward_batch)
    return forward_batch, True


@dataclasses.dataclass
class PendingPlan:
    """A plan captured at prepare time and replayed right before the launch."""

    forward_batch: ForwardBatch
    run_plan: Callable[[], None]
    replan_equivalent: bool = False

    @classmethod
    def for_backend(
        cls,
        backend: AttentionBackend,
        forward_batch: ForwardBatch,
        *,
        replan_equivalent: bool = False,
    ) -> "PendingPlan":
        return cls(
            forward_batch=forward_batch,
            run_plan=functools.partial(backend.init_forward_metadata, forward_batch),
            replan_equivalent=replan_equivalent,
        )


def stamp_planned(forward_batch: ForwardBatch) -> None:
    """Telemetry stamp the overlap scheduler reads; re-marks the batch."""
    forward_batch.mark_forward_metadata_ready()


def stamp_planned_preserving(forward_batch: ForwardBatch) -> None:
    """Telemetry stamp that keeps the mark site's replan decision."""
    forward_batch.mark_forward_metadata_ready(
        replan_equivalent=forward_batch.forward_metadata_replan_equivalent
    )


def maybe_plan_topk(
    backend: AttentionBackend, forward_batch: ForwardBatch, topk: int
) -> Optional[ForwardBatch]:
    if topk <= 1:
        return None
    backend.init_forward_metadata(forward_batch)
    return forward_batch
