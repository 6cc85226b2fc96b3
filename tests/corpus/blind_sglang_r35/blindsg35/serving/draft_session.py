"""DraftSession: carries one decode round's batch between draft stages."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, List, Optional, Tuple

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft
from sglang.srt.utils import fast_topk

from blindsg35.serving._plan import is_dp_padded
from blindsg35.serving.state import DraftExtendResult

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.scheduler import GenerationBatchResult

    from blindsg35.serving.strategies.base import BaseDraftStrategy

logger = logging.getLogger(__name__)


class PlannedExtend:
    """Context manager: plan + mark a draft-extend batch on enter, clear the
    mark on exit so a reused batch object never carries a stale plan."""

    def __init__(self, backend, forward_batch: ForwardBatch, *, replan_equivalent: bool = False):
        self.backend = backend
        self.forward_batch = forward_batch
        self.replan_equivalent = replan_equivalent

    def __enter__(self) -> ForwardBatch:
        if not self.forward_batch.forward_mode.is_idle():
            self.backend.init_forward_metadata(self.forward_batch)
            self.forward_batch.mark_forward_metadata_ready(
                replan_equivalent=self.replan_equivalent
            )
        return self.forward_batch

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.forward_batch.forward_metadata_ready = False
        return False


class DraftSession:
    def __init__(
        self,
        strategy: "BaseDraftStrategy",
        batch: "ScheduleBatch",
        forward_batch: Optional[ForwardBatch] = None,
        can_run_graph: bool = False,
    ):
        self.strategy = strategy
        self.batch = batch
        self.forward_batch = forward_batch
        self.can_run_graph = can_run_graph
        self.batch_result: Optional["GenerationBatchResult"] = None
        self.rounds = 0

    # ------------------------------------------------------------------
    # Construction
    # ------------------------------------------------------------------
    @staticmethod
    def _build_draft_batch(
        strategy: "BaseDraftStrategy", batch: "ScheduleBatch"
    ) -> Tuple[ForwardBatch, bool]:
        forward_batch, can_run_graph, _ = prepare_for_draft(
            batch.spec_info,
            strategy.req_to_token_pool,
            batch,
            strategy.cuda_graph_runner,
            strategy.draft_runner,
            strategy.topk,
            strategy.speculative_num_steps,
        )
        return forward_batch, bool(can_run_graph)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft
    # expect: SG106
    @classmethod
    def open(cls, strategy: "BaseDraftStrategy", batch: "ScheduleBatch") -> "DraftSession":
        forward_batch, can_run_graph = cls._build_draft_batch(strategy, batch)
        if (
            not can_run_graph
            and not forward_batch.forward_mode.is_idle()
            and strategy.speculative_num_steps > 1
        ):
            strategy.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return cls(strategy, batch, forward_batch, can_run_graph)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft
    # expect: clean
    @classmethod
    def open_no_padding(
        cls, strategy: "BaseDraftStrategy", batch: "ScheduleBatch"
    ) -> "DraftSession":
        forward_batch, can_run_graph = cls._build_draft_batch(strategy, batch)
        if can_run_graph:
            return cls(strategy, batch, forward_batch, can_run_graph)
        if is_dp_padded(forward_batch):
            raise NotImplementedError(
                "draft session: eager multi-step draft cannot run on a batch the "
                "forward pads for MLP sync; capture the draft cuda graph"
            )
        if not forward_batch.forward_mode.is_idle() and strategy.speculative_num_steps > 1:
            strategy.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return cls(strategy, batch, forward_batch, can_run_graph)

    def draft(self):
        self.rounds += 1
        if self.can_run_graph:
            return self.strategy._run_draft_graph(self.forward_batch)
        return self.strategy._forward_draft_steps(self.forward_batch)

    # ------------------------------------------------------------------
    # Draft decode on an externally built batch
    # ------------------------------------------------------------------
    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft
    # expect: SG106
    def run_draft_steps(self, forward_batch: ForwardBatch):
        s = self.strategy
        if not forward_batch.forward_mode.is_idle() and s.speculative_num_steps > 1:
            # Skip attention backend init for a 1-step draft: the loop then
            # only samples.
            s.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return s._forward_draft_steps(forward_batch)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft
    # expect: clean
    def run_draft_steps_checked(self, forward_batch: ForwardBatch):
        s = self.strategy
        if is_dp_padded(forward_batch):
            raise NotImplementedError(
                "eager multi-step draft under DP attention is refused"
            )
        if not forward_batch.forward_mode.is_idle() and s.speculative_num_steps > 1:
            s.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return s._forward_draft_steps(forward_batch)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft_forward
    # expect: SG106
    def run_draft_steps_per_step_plan(self, forward_batch: ForwardBatch):
        s = self.strategy
        spec_info = forward_batch.spec_info
        topk_p, topk_index = spec_info.topk_p, spec_info.topk_index
        hidden_states = spec_info.hidden_states
        tokens: List[torch.Tensor] = [topk_index]
        i = 0
        while i < s.speculative_num_steps - 1:
            backend = s.draft_attn_backend.attn_backends[i]
            forward_batch.input_ids = topk_index.flatten()
            spec_info.hidden_states = hidden_states
            if not forward_batch.forward_mode.is_idle():
                backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            with forward_context(
                ForwardContext(attn_backend=backend), forward_batch=forward_batch
            ):
                logits_output = s.draft_runner.forward(forward_batch).logits_output
            topk_p, topk_index = fast_topk(
                torch.softmax(logits_output.next_token_logits, dim=-1), 1, dim=-1
            )
            hidden_states = logits_output.hidden_states
            forward_batch.positions.add_(1)
            tokens.append(topk_index)
            i += 1
        return torch.cat(tokens, dim=1)

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode
    # expect: clean
    def run_multi_layer_extend(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        runners = self.strategy.worker.draft_runner_list
        out_tokens: List[torch.Tensor] = []
        for step, runner in enumerate(runners):
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
            # Left unmarked on purpose: each runner's forward plans its own
            # backend again after prepare_mlp_sync_batch.
            logits_output = runner.forward(forward_batch).logits_output
            logits = logits_output.next_token_logits[select_index]
            _, topk_index = fast_topk(torch.softmax(logits, dim=-1), 1, dim=-1)
            out_tokens.append(topk_index)
            if logits_output.hidden_states is not None:
                forward_batch.spec_info.hidden_states = logits_output.hidden_states
        return out_tokens

    # ------------------------------------------------------------------
    # Draft extend: advance() prepares, step() runs
    # ------------------------------------------------------------------
    def advance(self) -> Tuple[ForwardBatch, bool, torch.Tensor]:
        forward_batch, select_index = self.strategy._build_extend_batch(
            self.batch, self.batch_result
        )
        if forward_batch.forward_mode.is_idle():
            return forward_batch, False, select_index
        self.strategy.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        return forward_batch, True, select_index

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
    # expect: SG106
    def step(self) -> DraftExtendResult:
        forward_batch, planned, select_index = self.advance()
        if planned:
            forward_batch.mark_forward_metadata_ready()
        self.forward_batch = forward_batch
        return self.strategy._run_extend_forward(forward_batch, select_index)

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
    # expect: clean
    def step_replannable(self) -> DraftExtendResult:
        forward_batch, planned, select_index = self.advance()
        if planned:
            # advance() planned on draft_runner.attn_backend, the very backend
            # the eager forward plans on: let it re-plan a padded batch.
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        self.forward_batch = forward_batch
        return self.strategy._run_extend_forward(forward_batch, select_index)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: SG106
    def run_extend_in_context(self) -> DraftExtendResult:
        forward_batch, select_index = self.strategy._build_extend_batch(
            self.batch, self.batch_result
        )
        with PlannedExtend(self.strategy.draft_runner.attn_backend, forward_batch) as fb:
            result = self.strategy._run_extend_forward(fb, select_index)
        return result

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: clean
    def run_extend_in_replannable_context(self) -> DraftExtendResult:
        forward_batch, select_index = self.strategy._build_extend_batch(
            self.batch, self.batch_result
        )
        with PlannedExtend(
            self.strategy.draft_runner.attn_backend,
            forward_batch,
            replan_equivalent=True,
        ) as fb:
            result = self.strategy._run_extend_forward(fb, select_index)
        return result
