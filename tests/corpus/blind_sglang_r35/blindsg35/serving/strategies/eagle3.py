"""EAGLE-3 draft strategies (chain and tree) for the storefront fleet."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional, Tuple

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft
from sglang.srt.utils import is_npu

from blindsg35.serving._plan import is_dp_padded
from blindsg35.serving.config import register_strategy
from blindsg35.serving.decorators import preplan_unless_padded, preplanned, timed_forward
from blindsg35.serving.state import DraftExtendResult, PlannedBatch
from blindsg35.serving.strategies.base import BaseDraftStrategy

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.scheduler import GenerationBatchResult

logger = logging.getLogger(__name__)


@register_strategy("EAGLE3", "EAGLE")
class Eagle3DraftStrategy(BaseDraftStrategy):
    name = "eagle3"

    # ------------------------------------------------------------------
    # Draft extend (DRAFT_EXTEND_V2 after verify)
    # ------------------------------------------------------------------
    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
    # expect: SG106
    def prepare_draft_extend(
        self, batch: "ScheduleBatch", batch_result: "GenerationBatchResult"
    ) -> Tuple[PlannedBatch, torch.Tensor]:
        forward_batch, select_index = self._build_extend_batch(batch, batch_result)
        can_run_graph = bool(
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if forward_batch.forward_mode.is_idle() or can_run_graph:
            return PlannedBatch(forward_batch, planned=False, can_run_graph=can_run_graph), select_index
        # Plan on the draft-extend backend now so the eager forward can skip
        # its own init_forward_metadata.
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return PlannedBatch(forward_batch, planned=True), select_index

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
    # expect: clean
    def prepare_draft_extend_replannable(
        self, batch: "ScheduleBatch", batch_result: "GenerationBatchResult"
    ) -> Tuple[PlannedBatch, torch.Tensor]:
        forward_batch, select_index = self._build_extend_batch(batch, batch_result)
        can_run_graph = bool(
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if forward_batch.forward_mode.is_idle() or can_run_graph:
            return PlannedBatch(forward_batch, planned=False, can_run_graph=can_run_graph), select_index
        # Same backend object the eager forward plans on (draft_runner.attn_backend),
        # no view context: a post-pad re-plan is equivalent, so opt in.
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return PlannedBatch(forward_batch, planned=True), select_index

    def run_draft_extend_v1(
        self, batch: "ScheduleBatch", batch_result: "GenerationBatchResult"
    ) -> DraftExtendResult:
        planned, select_index = self.prepare_draft_extend(batch, batch_result)
        if planned.can_run_graph:
            out = self.cuda_graph_runner_for_draft_extend.execute(
                planned.forward_batch, select_index
            )
            return DraftExtendResult(out.next_token_logits, out.hidden_states)
        return self._run_extend_forward(planned.forward_batch, select_index)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: SG106
    def draft_extend_npu_aware(
        self, batch: "ScheduleBatch", batch_result: "GenerationBatchResult"
    ) -> DraftExtendResult:
        forward_batch, select_index = self._build_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            # Only the NPU block table goes stale after DP padding (see the
            # upstream NPU note); on CUDA the pre-pad plan is reused as-is.
            forward_batch.mark_forward_metadata_ready(replan_equivalent=is_npu())
        return self._run_extend_forward(forward_batch, select_index)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: clean
    def draft_extend_mlp_sync_aware(
        self, batch: "ScheduleBatch", batch_result: "GenerationBatchResult"
    ) -> DraftExtendResult:
        forward_batch, select_index = self._build_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            # Padded batches get a post-pad re-plan on the same backend.
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=is_dp_padded(forward_batch)
            )
        return self._run_extend_forward(forward_batch, select_index)

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
    # expect: SG106
    @timed_forward("draft_extend")
    @preplanned("draft_runner.attn_backend")
    def run_draft_extend_preplanned(
        self, forward_batch: ForwardBatch, select_index: Optional[torch.Tensor] = None
    ) -> DraftExtendResult:
        return self._run_extend_forward(forward_batch, select_index)

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
    # expect: clean
    @timed_forward("draft_extend")
    @preplan_unless_padded("draft_runner.attn_backend")
    def run_draft_extend_preplanned_unless_padded(
        self, forward_batch: ForwardBatch, select_index: Optional[torch.Tensor] = None
    ) -> DraftExtendResult:
        return self._run_extend_forward(forward_batch, select_index)

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
    # expect: clean
    def _prepare_extend_step(self, forward_batch: ForwardBatch) -> ForwardBatch:
        if forward_batch.forward_mode.is_idle():
            return forward_batch
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return forward_batch

    # ------------------------------------------------------------------
    # Draft decode (chain)
    # ------------------------------------------------------------------
    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft
    # expect: SG106
    def draft_chain(self, batch: "ScheduleBatch"):
        forward_batch, can_run_graph, _ = prepare_for_draft(
            batch.spec_info,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if can_run_graph:
            return self._run_draft_graph(forward_batch)
        # A chain (topk == 1) has one row per request, so DP padding only
        # appends dummy rows; the single-rank pre-plan is kept for it.
        if not self.cfg.dp_attention or self.topk == 1:
            if not forward_batch.forward_mode.is_idle() and self.speculative_num_steps > 1:
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            return self._forward_draft_steps(forward_batch)
        raise NotImplementedError(
            "tree drafts under DP attention need the draft cuda graph"
        )

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft
    # expect: clean
    def draft_chain_guarded(self, batch: "ScheduleBatch"):
        forward_batch, can_run_graph, _ = prepare_for_draft(
            batch.spec_info,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if can_run_graph:
            return self._run_draft_graph(forward_batch)
        if is_dp_padded(forward_batch):
            # The eager forward pads this batch, and a multi-step pre-plan
            # cannot be redone by the forward (it would plan the extend
            # backend, not attn_backends[i]).
            raise NotImplementedError(
                "eager multi-step draft under DP attention; capture the draft "
                "cuda graph for this batch size"
            )
        if not forward_batch.forward_mode.is_idle() and self.speculative_num_steps > 1:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self._forward_draft_steps(forward_batch)


@register_strategy("EAGLE3_TREE")
class Eagle3TreeStrategy(Eagle3DraftStrategy):
    name = "eagle3_tree"

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
    # expect: SG106
    def _prepare_extend_step(self, forward_batch: ForwardBatch) -> ForwardBatch:
        if forward_batch.forward_mode.is_idle():
            return forward_batch
        # Tree drafts carry a custom mask: build it once on the real rows and
        # pin it, a post-pad re-plan would rebuild it over dummy rows.
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return forward_batch
