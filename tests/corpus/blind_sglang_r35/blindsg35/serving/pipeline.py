"""Draft-extend pipeline stages built from small step-state dataclasses."""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

from blindsg35.serving._plan import freeze_plan_record, is_dp_padded
from blindsg35.serving.decorators import timed_forward
from blindsg35.serving.state import DraftExtendResult, DraftStepState

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.scheduler import GenerationBatchResult
    from sglang.srt.managers.tp_worker import TpModelWorker

    from blindsg35.serving.strategies.base import BaseDraftStrategy

logger = logging.getLogger(__name__)

Hook = Callable[[ForwardBatch], None]


class DraftExtendPipeline:
    def __init__(self, strategy: "BaseDraftStrategy", target_worker: "TpModelWorker"):
        self.strategy = strategy
        self.draft_runner = strategy.draft_runner
        self.target_runner = target_worker.model_runner
        self.step_counter = 0

    # ------------------------------------------------------------------
    # StepState stages
    # ------------------------------------------------------------------
    def _new_state(
        self, batch: "ScheduleBatch", batch_result: "GenerationBatchResult"
    ) -> DraftStepState:
        forward_batch, select_index = self.strategy._build_extend_batch(batch, batch_result)
        self.step_counter += 1
        return DraftStepState(
            step=self.step_counter,
            forward_batch=forward_batch,
            dp_padded=is_dp_padded(forward_batch),
            select_index=select_index,
        )

    def _plan_step(self, state: DraftStepState) -> DraftStepState:
        if not state.forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(state.forward_batch)
            state.metadata_ready = True
        return state

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: SG106
    def _launch_step(self, state: DraftStepState) -> DraftExtendResult:
        if state.metadata_ready:
            state.forward_batch.mark_forward_metadata_ready()
        return self.strategy._run_extend_forward(state.forward_batch, state.select_index)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: clean
    def _launch_step_padding_aware(self, state: DraftStepState) -> DraftExtendResult:
        if state.metadata_ready and not state.dp_padded:
            state.forward_batch.mark_forward_metadata_ready()
        # A padded batch stays unmarked and is planned again post-pad.
        return self.strategy._run_extend_forward(state.forward_batch, state.select_index)

    def run_staged(
        self, batch: "ScheduleBatch", batch_result: "GenerationBatchResult"
    ) -> DraftExtendResult:
        state = self._plan_step(self._new_state(batch, batch_result))
        return self._launch_step(state)

    # ------------------------------------------------------------------
    # try/finally variants
    # ------------------------------------------------------------------
    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
    # expect: SG106
    @timed_forward("draft_extend.cleanup")
    def run_with_cleanup(
        self, forward_batch: ForwardBatch, select_index: Optional[torch.Tensor]
    ) -> DraftExtendResult:
        try:
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            return self.strategy._run_extend_forward(forward_batch, select_index)
        finally:
            # Never leak the mark into the next round's reuse of this batch.
            forward_batch.forward_metadata_ready = False

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
    # expect: clean
    @timed_forward("draft_extend.invalidate")
    def run_with_invalidation(
        self, forward_batch: ForwardBatch, select_index: Optional[torch.Tensor]
    ) -> DraftExtendResult:
        hidden_backup = forward_batch.spec_info.hidden_states
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        if is_dp_padded(forward_batch):
            # The forward pads this batch: drop the pre-pad plan so
            # needs_forward_metadata_init() asks for a post-pad one.
            forward_batch.forward_metadata_ready = False
        try:
            return self.strategy._run_extend_forward(forward_batch, select_index)
        finally:
            forward_batch.spec_info.hidden_states = hidden_backup

    # ------------------------------------------------------------------
    # Pre-forward hooks
    # ------------------------------------------------------------------
    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
    # expect: SG106
    def run_hooks(
        self,
        forward_batch: ForwardBatch,
        select_index: Optional[torch.Tensor],
        extra_hooks: Tuple[Hook, ...] = (),
    ) -> DraftExtendResult:
        backend = self.draft_runner.attn_backend

        def _plan(fb: ForwardBatch) -> None:
            if not fb.forward_mode.is_idle():
                backend.init_forward_metadata(fb)
                fb.mark_forward_metadata_ready()

        hooks: List[Hook] = [*extra_hooks, _plan]
        for hook in hooks:
            hook(forward_batch)
        return self.strategy._run_extend_forward(forward_batch, select_index)

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode
    # expect: clean
    def run_hooks_unmarked(
        self,
        forward_batch: ForwardBatch,
        select_index: Optional[torch.Tensor],
        extra_hooks: Tuple[Hook, ...] = (),
    ) -> DraftExtendResult:
        backend = self.draft_runner.attn_backend

        def _warm_plan(fb: ForwardBatch) -> None:
            # Warms the index buffers only; the batch stays unmarked so the
            # forward still plans post-pad.
            if not fb.forward_mode.is_idle():
                backend.init_forward_metadata(fb)

        hooks: List[Hook] = [*extra_hooks, _warm_plan]
        for hook in hooks:
            hook(forward_batch)
        return self.strategy._run_extend_forward(forward_batch, select_index)

    # ------------------------------------------------------------------
    # Plan-record handling
    # ------------------------------------------------------------------
    # idiom: sglang/srt/model_executor/forward_batch_info.py ForwardBatch.mark_forward_metadata_ready
    # expect: SG106
    def run_sanitized(
        self, forward_batch: ForwardBatch, select_index: Optional[torch.Tensor]
    ) -> DraftExtendResult:
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            if self.strategy.topk > 1:
                # Tree masks are built for the real rows; pin the plan.
                freeze_plan_record(forward_batch)
        return self.strategy._run_extend_forward(forward_batch, select_index)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: SG106
    def run_if_not_idle(
        self, forward_batch: ForwardBatch, select_index: Optional[torch.Tensor]
    ) -> DraftExtendResult:
        # DP padding only fabricates rows on idle ranks; a rank with real
        # requests keeps its shape, so its pre-plan stays valid.
        if forward_batch.forward_mode.is_idle():
            return self.strategy._run_extend_forward(forward_batch, select_index)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.strategy._run_extend_forward(forward_batch, select_index)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: clean
    def run_if_not_padded(
        self, forward_batch: ForwardBatch, select_index: Optional[torch.Tensor]
    ) -> DraftExtendResult:
        if forward_batch.forward_mode.is_idle() or is_dp_padded(forward_batch):
            return self.strategy._run_extend_forward(forward_batch, select_index)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.strategy._run_extend_forward(forward_batch, select_index)

    # ------------------------------------------------------------------
    # Forward tables (deprecated skip_attn_backend_init kwarg)
    # ------------------------------------------------------------------
    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner.forward (skip_attn_backend_init)
    # expect: SG106
    def run_from_table(
        self, forward_batch: ForwardBatch, select_index: Optional[torch.Tensor]
    ) -> DraftExtendResult:
        pre_planned = functools.partial(
            self.draft_runner.forward, skip_attn_backend_init=True
        )
        table: Dict[ForwardMode, Callable] = {
            ForwardMode.DECODE: pre_planned,
            ForwardMode.DRAFT_EXTEND_V2: pre_planned,
            ForwardMode.IDLE: self.draft_runner.forward,
        }
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        logits_output = table[forward_batch.forward_mode](forward_batch).logits_output
        logits = logits_output.next_token_logits
        if select_index is not None:
            logits = logits[select_index]
        return DraftExtendResult(logits, logits_output.hidden_states)

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner.forward (skip_attn_backend_init)
    # expect: clean
    def run_from_table_verify_only(
        self, forward_batch: ForwardBatch, select_index: Optional[torch.Tensor]
    ) -> DraftExtendResult:
        graph_runner = self.target_runner.decode_cuda_graph_runner
        eager_verify = forward_batch.forward_mode.is_target_verify() and not (
            graph_runner and graph_runner.can_run_graph(forward_batch)
        )
        table: Dict[ForwardMode, Tuple[Optional[object], Callable]] = {
            # Eager TARGET_VERIFY is re-planned by the eager runner even when
            # marked, so the deprecated skip flag is harmless there.
            ForwardMode.TARGET_VERIFY: (
                (self.target_runner.attn_backend,
                 functools.partial(self.target_runner.forward, skip_attn_backend_init=True))
                if eager_verify
                else (None, self.target_runner.forward)
            ),
            ForwardMode.DRAFT_EXTEND_V2: (None, self.draft_runner.forward),
            ForwardMode.IDLE: (None, self.draft_runner.forward),
        }
        planner, forward_fn = table[forward_batch.forward_mode]
        if planner is not None:
            planner.init_forward_metadata(forward_batch)
        logits_output = forward_fn(forward_batch).logits_output
        logits = logits_output.next_token_logits
        if select_index is not None:
            logits = logits[select_index]
        return DraftExtendResult(logits, logits_output.hidden_states)
