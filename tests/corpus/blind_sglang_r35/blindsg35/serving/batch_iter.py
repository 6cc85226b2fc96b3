"""Generators that yield draft batches to the scheduler loop."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Iterable, Iterator, List, Tuple

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

from blindsg35.serving.state import DraftExtendResult

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.scheduler import GenerationBatchResult

    from blindsg35.serving.strategies.base import BaseDraftStrategy

logger = logging.getLogger(__name__)

Pending = Iterable[Tuple["ScheduleBatch", "GenerationBatchResult"]]


# idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
# expect: SG106
def iter_planned_draft_extend_batches(
    strategy: "BaseDraftStrategy", pending: Pending
) -> Iterator[Tuple[ForwardBatch, torch.Tensor]]:
    for batch, batch_result in pending:
        forward_batch, select_index = strategy._build_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            strategy.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        yield forward_batch, select_index


# idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
# expect: clean
def iter_draft_extend_batches(
    strategy: "BaseDraftStrategy", pending: Pending
) -> Iterator[Tuple[ForwardBatch, torch.Tensor]]:
    for batch, batch_result in pending:
        forward_batch, select_index = strategy._build_extend_batch(batch, batch_result)
        # Yielded unplanned: the forward plans after its MLP-sync padding.
        yield forward_batch, select_index


def drain_draft_extend(
    strategy: "BaseDraftStrategy",
    batches: Iterator[Tuple[ForwardBatch, torch.Tensor]],
) -> List[DraftExtendResult]:
    results: List[DraftExtendResult] = []
    for forward_batch, select_index in batches:
        results.append(strategy._run_extend_forward(forward_batch, select_index))
    return results


# idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft
# expect: SG106
def iter_draft_steps(
    strategy: "BaseDraftStrategy", forward_batch: ForwardBatch
) -> Iterator[Tuple[int, ForwardBatch, object]]:
    if not forward_batch.forward_mode.is_idle() and strategy.speculative_num_steps > 1:
        strategy.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    step = 0
    while step < strategy.speculative_num_steps - 1:
        yield step, forward_batch, strategy.draft_attn_backend.attn_backends[step]
        step += 1


def run_draft_steps_from_iter(
    strategy: "BaseDraftStrategy", forward_batch: ForwardBatch
) -> List[torch.Tensor]:
    tokens: List[torch.Tensor] = []
    spec_info = forward_batch.spec_info
    topk_index = spec_info.topk_index
    for step, fb, backend in iter_draft_steps(strategy, forward_batch):
        fb.input_ids = topk_index.flatten()
        with forward_context(ForwardContext(attn_backend=backend), forward_batch=fb):
            logits_output = strategy.draft_runner.forward(fb).logits_output
        topk_index = torch.argmax(logits_output.next_token_logits, dim=-1, keepdim=True)
        spec_info.hidden_states = logits_output.hidden_states
        fb.positions.add_(1)
        tokens.append(topk_index)
    return tokens
