"""Draft-extend (after verify) hooks of the fork's EAGLE v2 draft workers.

Every class overrides ``EagleDraftWorker._draft_extend_for_decode``. The batch
is built either with upstream ``prepare_for_draft_extend`` or with the fork's
split builders in ``blindsg42.spec.preplan``; the forward runs on the compute
stream through ``draft_runner.forward`` or the draft-extend cuda graph.
"""

from __future__ import annotations

import functools
import logging
from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft_extend
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

from blindsg42.spec.preplan import (
    PlannedExtend,
    build_draft_extend_forward_batch,
    build_planned_extend,
    draft_extend_select_index,
    finish_draft_extend,
    plan_draft_extend_batch,
    plan_draft_extend_batch_rank_local,
)

logger = logging.getLogger(__name__)


def _wait_plan_stream(worker: EagleDraftWorker) -> None:
    if worker.plan_stream:
        torch.get_device_module(worker.device).current_stream().wait_stream(
            worker.plan_stream
        )


def _enter_plan_stream(worker: EagleDraftWorker) -> None:
    if worker.plan_stream:
        worker.plan_stream.wait_stream(
            torch.get_device_module(worker.device).current_stream()
        )


class TupleExtendDraftWorker(EagleDraftWorker):
    """Uses the fork's split builder; the plan happens on the plan stream."""

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        _enter_plan_stream(self)
        with self.plan_stream_ctx:
            forward_batch, can_run_cuda_graph = plan_draft_extend_batch(
                batch,
                self.draft_runner,
                batch_result,
                self.speculative_num_draft_tokens,
                self.cuda_graph_runner_for_draft_extend,
            )
        _wait_plan_stream(self)

        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class DataclassExtendDraftWorker(EagleDraftWorker):
    """Keeps the plan facts next to the batch in a ``PlannedExtend`` record."""

    replan_after_mlp_sync: bool = False

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        _enter_plan_stream(self)
        with self.plan_stream_ctx:
            planned: PlannedExtend = build_planned_extend(
                batch,
                self.draft_runner,
                batch_result,
                self.speculative_num_draft_tokens,
                self.cuda_graph_runner_for_draft_extend,
                self.device,
                replan_equivalent=self.replan_after_mlp_sync,
            )
        _wait_plan_stream(self)

        if planned.can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                planned.forward_batch, planned.select_index
            )
        else:
            if planned.planned_bs is not None:
                logger.debug(
                    "draft extend pre-planned for bs=%d", planned.planned_bs
                )
            logits_output = self.draft_runner.forward(
                planned.forward_batch
            ).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            planned.select_index,
            topk=self.topk,
            ran_cuda_graph=planned.can_run_cuda_graph,
        )


class ClosureExtendDraftWorker(EagleDraftWorker):
    """Builds the eager forward as a closure so the canary wrapper can run it."""

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        forward_batch = build_draft_extend_forward_batch(
            batch, self.draft_runner, batch_result, self.speculative_num_draft_tokens
        )
        graph_runner = self.cuda_graph_runner_for_draft_extend
        can_run_cuda_graph = bool(
            graph_runner is not None and graph_runner.can_run_graph(forward_batch)
        )
        backend = self.draft_runner.attn_backend

        def _plan():
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        def _run_eager():
            return self.draft_runner.forward(forward_batch).logits_output

        def _run_graph():
            return graph_runner.execute(forward_batch, select_index)

        if can_run_cuda_graph:
            run = _run_graph
        else:
            if not forward_batch.forward_mode.is_idle():
                with self.plan_stream_ctx:
                    _plan()
                _wait_plan_stream(self)
            run = _run_eager

        logits_output = run()
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class PartialExtendDraftWorker(EagleDraftWorker):
    """Binds the forward with functools.partial ahead of the stream join."""

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        _enter_plan_stream(self)
        with self.plan_stream_ctx:
            forward_batch = build_draft_extend_forward_batch(
                batch,
                self.draft_runner,
                batch_result,
                self.speculative_num_draft_tokens,
            )
            can_run_cuda_graph = bool(
                self.cuda_graph_runner_for_draft_extend
                and self.cuda_graph_runner_for_draft_extend.can_run_graph(
                    forward_batch
                )
            )
            if can_run_cuda_graph:
                launch = functools.partial(
                    self.cuda_graph_runner_for_draft_extend.execute,
                    forward_batch,
                    select_index,
                )
            else:
                if not forward_batch.forward_mode.is_idle():
                    self.draft_runner.attn_backend.init_forward_metadata(
                        forward_batch
                    )
                    mark = functools.partial(forward_batch.mark_forward_metadata_ready)
                    mark()
                launch = functools.partial(self.draft_runner.forward, forward_batch)
        _wait_plan_stream(self)

        out = launch()
        logits_output = out if can_run_cuda_graph else out.logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class RestoringExtendDraftWorker(EagleDraftWorker):
    """Upstream prepare_for_draft_extend, with the ScheduleBatch fields it
    rewrites restored whatever happens in the forward."""

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        forward_mode_backup = batch.forward_mode
        input_ids_backup = batch.input_ids
        spec_info_backup = batch.spec_info
        next_token_ids = batch_result.next_token_ids.to(torch.int64)
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        try:
            _enter_plan_stream(self)
            with self.plan_stream_ctx:
                forward_batch = prepare_for_draft_extend(
                    draft_extend_input,
                    batch,
                    next_token_ids,
                    self.speculative_num_draft_tokens,
                    self.draft_runner,
                    self.cuda_graph_runner_for_draft_extend,
                    return_hidden_states_before_norm=False,
                    kv_loc_plan=kv_loc_plan,
                )
            _wait_plan_stream(self)
            can_run_cuda_graph = bool(
                self.cuda_graph_runner_for_draft_extend
                and self.cuda_graph_runner_for_draft_extend.can_run_graph(
                    forward_batch
                )
            )
            if can_run_cuda_graph:
                logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                    forward_batch, select_index
                )
            else:
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            finish_draft_extend(
                batch,
                batch_result,
                logits_output,
                select_index,
                topk=self.topk,
                ran_cuda_graph=can_run_cuda_graph,
            )
        finally:
            batch.forward_mode = forward_mode_backup
            batch.input_ids = input_ids_backup
            batch.spec_info = spec_info_backup


class ShortCircuitExtendDraftWorker(EagleDraftWorker):
    """Returns early for the graph and idle cases; the eager tail plans."""

    def _extend_via_graph(self, forward_batch, batch, batch_result, select_index):
        logits_output = self.cuda_graph_runner_for_draft_extend.execute(
            forward_batch, select_index
        )
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=True,
        )

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        forward_batch = build_draft_extend_forward_batch(
            batch, self.draft_runner, batch_result, self.speculative_num_draft_tokens
        )
        graph_runner = self.cuda_graph_runner_for_draft_extend
        if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
            return self._extend_via_graph(
                forward_batch, batch, batch_result, select_index
            )
        if forward_batch.forward_mode.is_idle():
            # Idle rank: still enter the collectives, nothing to select.
            self.draft_runner.forward(forward_batch)
            return None

        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=False,
        )
        return None


class LockstepExtendDraftWorker(EagleDraftWorker):
    """Records the pre-plan on attention-DP deployments."""

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        forward_batch = build_draft_extend_forward_batch(
            batch, self.draft_runner, batch_result, self.speculative_num_draft_tokens
        )
        can_run_cuda_graph = bool(
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                if forward_batch.global_num_tokens_cpu is not None:
                    # DP ranks run the draft extend in lockstep; recording the
                    # plan keeps every rank on the same (single) planning pass.
                    forward_batch.mark_forward_metadata_ready()
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class CapturedLayoutExtendDraftWorker(EagleDraftWorker):
    """Draft worker for graph-enabled deployments; the eager fallback keeps
    the captured planning regime."""

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        _enter_plan_stream(self)
        with self.plan_stream_ctx:
            forward_batch = build_draft_extend_forward_batch(
                batch,
                self.draft_runner,
                batch_result,
                self.speculative_num_draft_tokens,
            )
        _wait_plan_stream(self)
        graph_runner = self.cuda_graph_runner_for_draft_extend
        can_run_cuda_graph = bool(
            graph_runner is not None and graph_runner.can_run_graph(forward_batch)
        )
        if can_run_cuda_graph:
            logits_output = graph_runner.execute(forward_batch, select_index)
        else:
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            if graph_runner is not None:
                # Graphs captured: the eager fallback uses the same backend
                # object, so the runner need not plan again.
                forward_batch.mark_forward_metadata_ready()
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class FlaggedExtendDraftWorker(EagleDraftWorker):
    """Sets the batch's plan flag directly after planning."""

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        forward_batch = build_draft_extend_forward_batch(
            batch, self.draft_runner, batch_result, self.speculative_num_draft_tokens
        )
        can_run_cuda_graph = bool(
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            if not forward_batch.forward_mode.is_idle():
                with self.plan_stream_ctx:
                    self.draft_runner.attn_backend.init_forward_metadata(
                        forward_batch
                    )
                    forward_batch.forward_metadata_ready = True
                _wait_plan_stream(self)
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class UpstreamBuilderExtendDraftWorker(EagleDraftWorker):
    """Upstream prepare_for_draft_extend, re-marked as replan-equivalent: the
    plan used ``draft_runner.attn_backend``, the same object the forward path
    plans with, so a padded batch may be re-planned there."""

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        next_token_ids = batch_result.next_token_ids.to(torch.int64)
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        _enter_plan_stream(self)
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                draft_extend_input,
                batch,
                next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner,
                self.cuda_graph_runner_for_draft_extend,
                return_hidden_states_before_norm=False,
                kv_loc_plan=kv_loc_plan,
            )
            if forward_batch.forward_metadata_ready:
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        _wait_plan_stream(self)

        can_run_cuda_graph = bool(
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class PlanStreamExtendDraftWorker(EagleDraftWorker):
    """Plans on the plan stream only to warm the wrapper workspace; the
    forward path still plans the final batch itself."""

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        _enter_plan_stream(self)
        with self.plan_stream_ctx:
            forward_batch = build_draft_extend_forward_batch(
                batch,
                self.draft_runner,
                batch_result,
                self.speculative_num_draft_tokens,
            )
            can_run_cuda_graph = bool(
                self.cuda_graph_runner_for_draft_extend
                and self.cuda_graph_runner_for_draft_extend.can_run_graph(
                    forward_batch
                )
            )
            if not can_run_cuda_graph and not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        _wait_plan_stream(self)

        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class UpstreamBuilderDpExtendDraftWorker(EagleDraftWorker):
    """Upstream prepare_for_draft_extend; under MLP sync the pre-pad record is
    dropped so ModelRunner plans the padded batch."""

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        next_token_ids = batch_result.next_token_ids.to(torch.int64)
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        _enter_plan_stream(self)
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                draft_extend_input,
                batch,
                next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner,
                self.cuda_graph_runner_for_draft_extend,
                return_hidden_states_before_norm=False,
                kv_loc_plan=kv_loc_plan,
            )
        _wait_plan_stream(self)

        can_run_cuda_graph = bool(
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            if forward_batch.global_num_tokens_cpu is not None:
                # prepare_mlp_sync_batch will pad this batch; the pre-pad
                # plan must not be reused.
                forward_batch.forward_metadata_ready = False
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class GraphFirstExtendDraftWorker(EagleDraftWorker):
    """Pre-plans only for the graph replay; eager batches are left to the
    runner."""

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        forward_batch = build_draft_extend_forward_batch(
            batch, self.draft_runner, batch_result, self.speculative_num_draft_tokens
        )
        graph_runner = self.cuda_graph_runner_for_draft_extend
        can_run_cuda_graph = bool(
            graph_runner is not None and graph_runner.can_run_graph(forward_batch)
        )
        if can_run_cuda_graph:
            # The replay refreshes the captured metadata buffers from the
            # batch; the record only tells it the plan-stream pass ran.
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            logits_output = graph_runner.execute(forward_batch, select_index)
        else:
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class TupleBuilderExtendDraftWorker(EagleDraftWorker):
    """Uses the builder that only records plans MLP sync cannot invalidate."""

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        _enter_plan_stream(self)
        with self.plan_stream_ctx:
            forward_batch, can_run_cuda_graph, marked = (
                plan_draft_extend_batch_rank_local(
                    batch,
                    self.draft_runner,
                    batch_result,
                    self.speculative_num_draft_tokens,
                    self.cuda_graph_runner_for_draft_extend,
                )
            )
        _wait_plan_stream(self)

        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            if not marked:
                logger.debug("draft extend: runner plans the padded batch")
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class RecordExtendDraftWorker(EagleDraftWorker):
    """``PlannedExtend`` record built with the replan opt-in."""

    replan_after_mlp_sync: bool = True

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        _enter_plan_stream(self)
        with self.plan_stream_ctx:
            planned: PlannedExtend = build_planned_extend(
                batch,
                self.draft_runner,
                batch_result,
                self.speculative_num_draft_tokens,
                self.cuda_graph_runner_for_draft_extend,
                self.device,
                replan_equivalent=self.replan_after_mlp_sync,
            )
        _wait_plan_stream(self)

        if planned.can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                planned.forward_batch, planned.select_index
            )
        else:
            logits_output = self.draft_runner.forward(
                planned.forward_batch
            ).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            planned.select_index,
            topk=self.topk,
            ran_cuda_graph=planned.can_run_cuda_graph,
        )


class ClosureRunExtendDraftWorker(EagleDraftWorker):
    """Closure-driven forward that drops a pre-pad record before running."""

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        forward_batch = build_draft_extend_forward_batch(
            batch, self.draft_runner, batch_result, self.speculative_num_draft_tokens
        )
        graph_runner = self.cuda_graph_runner_for_draft_extend
        can_run_cuda_graph = bool(
            graph_runner is not None and graph_runner.can_run_graph(forward_batch)
        )
        backend = self.draft_runner.attn_backend

        def _plan():
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        def _run_eager():
            if forward_batch.global_num_tokens_cpu is not None:
                # Padding follows; let the runner plan the final shape.
                forward_batch.forward_metadata_ready = False
            return self.draft_runner.forward(forward_batch).logits_output

        if can_run_cuda_graph:
            logits_output = graph_runner.execute(forward_batch, select_index)
        else:
            if not forward_batch.forward_mode.is_idle():
                with self.plan_stream_ctx:
                    _plan()
                _wait_plan_stream(self)
            logits_output = _run_eager()
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class RankExtendDraftWorker(EagleDraftWorker):
    """Records the pre-plan only on ranks whose batch MLP sync leaves alone."""

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        forward_batch = build_draft_extend_forward_batch(
            batch, self.draft_runner, batch_result, self.speculative_num_draft_tokens
        )
        can_run_cuda_graph = bool(
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                if forward_batch.global_num_tokens_cpu is None:
                    # No MLP sync: ModelRunner forwards this exact shape.
                    forward_batch.mark_forward_metadata_ready()
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )
