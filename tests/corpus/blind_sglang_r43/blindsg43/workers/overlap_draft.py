"""Overlap-scheduled EAGLE draft worker.

Subclasses the upstream ``EagleDraftWorker`` (spec v2) and reorganises the
draft / draft-extend steps around the plan stream: metadata planning and
batch construction happen on ``plan_stream`` while the previous verify is
still running on the compute stream.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_worker_common import (
    prepare_for_draft,
    prepare_for_draft_extend,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils import require_mlp_sync

from blindsg43.common.switches import draft_preplan_enabled, mlp_sync_required

logger = logging.getLogger(__name__)

DraftOutputs = Tuple[
    Optional[torch.Tensor],
    Optional[torch.Tensor],
    Optional[torch.Tensor],
    Optional[torch.Tensor],
]


@dataclass
class DraftPlanRecord:
    forward_batch: ForwardBatch
    can_run_graph: bool
    planned: bool = False
    replan_equivalent: bool = False


class ForkEagleDraftWorker(EagleDraftWorker):
    """EAGLE draft worker with plan-stream batch preparation."""

    # ------------------------------------------------------------------
    # helpers
    # ------------------------------------------------------------------
    def _prepare_draft_batch(self, batch: ScheduleBatch):
        return prepare_for_draft(
            batch.spec_info,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
            target_translator=self.target_worker.model_runner.kv_index_translator,
            num_draft_tokens=self.speculative_num_draft_tokens,
        )

    def _plan_draft_steps(self, forward_batch: ForwardBatch) -> None:
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    def _needs_step_plan(self, forward_batch: ForwardBatch) -> bool:
        return (
            not forward_batch.forward_mode.is_idle() and self.speculative_num_steps > 1
        )

    def _run_draft(
        self, forward_batch: ForwardBatch, can_run_decode_cuda_graph: bool
    ) -> DraftOutputs:
        if can_run_decode_cuda_graph:
            return self.cuda_graph_runner.execute(forward_batch)
        return self.draft_forward(forward_batch)

    def _prepare_and_plan(
        self, batch: ScheduleBatch
    ) -> Tuple[ForwardBatch, bool, bool]:
        forward_batch, can_run_decode_cuda_graph, _ = self._prepare_draft_batch(batch)
        planned = False
        if not can_run_decode_cuda_graph and self._needs_step_plan(forward_batch):
            if forward_batch.global_num_tokens_cpu is not None:
                raise RuntimeError(
                    f"no draft graph for bs={forward_batch.batch_size} under MLP sync"
                )
            self._plan_draft_steps(forward_batch)
            planned = True
        return forward_batch, can_run_decode_cuda_graph, planned

    def _make_plan_record(self, batch: ScheduleBatch) -> DraftPlanRecord:
        forward_batch, can_run_decode_cuda_graph, _ = self._prepare_draft_batch(batch)
        record = DraftPlanRecord(forward_batch, bool(can_run_decode_cuda_graph))
        if not record.can_run_graph and self._needs_step_plan(forward_batch):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            record.planned = True
        return record

    def _build_draft_extend_input(
        self, batch_result: GenerationBatchResult
    ) -> Tuple[EagleDraftExtendInput, torch.Tensor, torch.Tensor]:
        num_correct_drafts = batch_result.accept_lens - 1
        bs = batch_result.accept_lens.shape[0]
        select_index = (
            torch.arange(
                0,
                bs * self.speculative_num_draft_tokens,
                self.speculative_num_draft_tokens,
                device=self.device,
            )
            + batch_result.accept_lens
            - 1
        )
        next_token_ids = batch_result.next_token_ids.to(torch.int64)
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=num_correct_drafts,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        return draft_extend_input, select_index, next_token_ids

    # ------------------------------------------------------------------
    # draft decode
    # ------------------------------------------------------------------
    # expect: SG106
    def draft_eager(self, batch: ScheduleBatch) -> DraftOutputs:
        forward_batch, can_run_decode_cuda_graph, _ = self._prepare_draft_batch(batch)
        if not can_run_decode_cuda_graph and self._needs_step_plan(forward_batch):
            self._plan_draft_steps(forward_batch)
        return self._run_draft(forward_batch, can_run_decode_cuda_graph)

    # expect: clean
    def draft_eager_graph_first(self, batch: ScheduleBatch) -> DraftOutputs:
        forward_batch, can_run_decode_cuda_graph, _ = self._prepare_draft_batch(batch)
        if not can_run_decode_cuda_graph and self._needs_step_plan(forward_batch):
            if require_mlp_sync():
                raise RuntimeError(
                    "multi-step eager draft cannot run under MLP sync: "
                    f"bs={forward_batch.batch_size} has no captured draft graph"
                )
            self._plan_draft_steps(forward_batch)
        return self._run_draft(forward_batch, can_run_decode_cuda_graph)

    # expect: SG106
    def draft_plan_stream(self, batch: ScheduleBatch) -> DraftOutputs:
        compute_stream = torch.get_device_module(self.device).current_stream()
        if self.plan_stream:
            self.plan_stream.wait_stream(compute_stream)
        with self.plan_stream_ctx:
            forward_batch, can_run_decode_cuda_graph, _ = self._prepare_draft_batch(
                batch
            )
            if not can_run_decode_cuda_graph and self._needs_step_plan(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            compute_stream.wait_stream(self.plan_stream)
        return self._run_draft(forward_batch, can_run_decode_cuda_graph)

    # expect: SG106
    def draft_with_closure(self, batch: ScheduleBatch) -> DraftOutputs:
        forward_batch, can_run_decode_cuda_graph, _ = self._prepare_draft_batch(batch)

        def _preplan() -> None:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        if not can_run_decode_cuda_graph and self._needs_step_plan(forward_batch):
            _preplan()
        return self._run_draft(forward_batch, can_run_decode_cuda_graph)

    # expect: clean
    def draft_with_local_preplan(self, batch: ScheduleBatch) -> DraftOutputs:
        forward_batch, can_run_decode_cuda_graph, _ = self._prepare_draft_batch(batch)

        def _preplan() -> None:
            if forward_batch.global_num_tokens_cpu is not None:
                raise RuntimeError(
                    "eager draft pre-plan on an MLP-synced batch "
                    f"(global_num_tokens={forward_batch.global_num_tokens_cpu})"
                )
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        if not can_run_decode_cuda_graph and self._needs_step_plan(forward_batch):
            _preplan()
        return self._run_draft(forward_batch, can_run_decode_cuda_graph)

    # expect: clean
    def draft_from_tuple(self, batch: ScheduleBatch) -> DraftOutputs:
        forward_batch, can_run_decode_cuda_graph, planned = self._prepare_and_plan(
            batch
        )
        if planned:
            logger.debug("draft bs=%d pre-planned", forward_batch.batch_size)
        return self._run_draft(forward_batch, can_run_decode_cuda_graph)

    # expect: SG106
    def draft_from_plan_record(self, batch: ScheduleBatch) -> DraftOutputs:
        record = self._make_plan_record(batch)
        if record.planned:
            record.forward_batch.mark_forward_metadata_ready(
                replan_equivalent=record.replan_equivalent
            )
        return self._run_draft(record.forward_batch, record.can_run_graph)

    # expect: SG106
    def draft_server_args_gate(self, batch: ScheduleBatch) -> DraftOutputs:
        forward_batch, can_run_decode_cuda_graph, _ = self._prepare_draft_batch(batch)
        if not can_run_decode_cuda_graph and self._needs_step_plan(forward_batch):
            if self.server_args.enable_dp_attention:
                raise RuntimeError("eager multi-step draft is unsupported with DP attention")
            self._plan_draft_steps(forward_batch)
        return self._run_draft(forward_batch, can_run_decode_cuda_graph)

    # expect: SG106
    def draft_env_switch(self, batch: ScheduleBatch) -> DraftOutputs:
        forward_batch, can_run_decode_cuda_graph, _ = self._prepare_draft_batch(batch)
        if not can_run_decode_cuda_graph and self._needs_step_plan(forward_batch):
            if draft_preplan_enabled():
                self._plan_draft_steps(forward_batch)
            else:
                raise RuntimeError("eager draft requires SGLANG_FORK_DRAFT_PREPLAN")
        return self._run_draft(forward_batch, can_run_decode_cuda_graph)

    # expect: clean
    def draft_env_gated(self, batch: ScheduleBatch) -> DraftOutputs:
        forward_batch, can_run_decode_cuda_graph, _ = self._prepare_draft_batch(batch)
        if not can_run_decode_cuda_graph and self._needs_step_plan(forward_batch):
            if not draft_preplan_enabled() or mlp_sync_required():
                raise RuntimeError(
                    "eager draft needs SGLANG_FORK_DRAFT_PREPLAN and no MLP sync"
                )
            self._plan_draft_steps(forward_batch)
        return self._run_draft(forward_batch, can_run_decode_cuda_graph)

    # ------------------------------------------------------------------
    # draft extend after verify
    # ------------------------------------------------------------------
    # expect: SG106
    def draft_extend_for_decode_fork(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ) -> torch.Tensor:
        draft_extend_input, select_index, next_token_ids = (
            self._build_draft_extend_input(batch_result)
        )
        if self.plan_stream:
            self.plan_stream.wait_stream(
                torch.get_device_module(self.device).current_stream()
            )
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                draft_extend_input,
                batch,
                next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner,
                self.cuda_graph_runner_for_draft_extend,
                return_hidden_states_before_norm=False,
            )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        runner = self.cuda_graph_runner_for_draft_extend
        if runner and runner.can_run_graph(forward_batch):
            out = runner.execute(forward_batch, select_index)
            return out.next_token_logits
        out = self.draft_runner.forward(forward_batch).logits_output
        return out.next_token_logits[select_index]

    # expect: clean
    def draft_extend_for_decode_eager(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ) -> torch.Tensor:
        draft_extend_input, select_index, next_token_ids = (
            self._build_draft_extend_input(batch_result)
        )
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                draft_extend_input,
                batch,
                next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner,
                self.cuda_graph_runner_for_draft_extend,
                return_hidden_states_before_norm=False,
            )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        runner = self.cuda_graph_runner_for_draft_extend
        if runner and runner.can_run_graph(forward_batch):
            out = runner.execute(forward_batch, select_index)
            return out.next_token_logits
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.forward_metadata_ready = False
        out = self.draft_runner.forward(forward_batch).logits_output
        return out.next_token_logits[select_index]
