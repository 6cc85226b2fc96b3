"""Standalone-draft (separate small model) hooks.

The standalone draft has its own ``TpModelWorker``; the fork routes its draft
extend through ``TpModelWorker.forward_batch_generation`` so the worker-level
hooks (hicache consumer, dllm dispatch) stay in one place.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker

from blindsg42.spec.preplan import (
    build_draft_extend_forward_batch,
    draft_extend_select_index,
    finish_draft_extend,
)

logger = logging.getLogger(__name__)


class WorkerRoutedStandaloneDraftWorker(StandaloneDraftWorker):
    """Plans on the plan stream, forwards through the draft TpModelWorker."""

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
        if self.plan_stream:
            self.plan_stream.wait_stream(
                torch.get_device_module(self.device).current_stream()
            )
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
            preplanned = False
            if not can_run_cuda_graph and not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                preplanned = True
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )

        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            result = self.draft_worker.forward_batch_generation(
                batch=None,
                forward_batch=forward_batch,
                skip_attn_backend_init=preplanned,
            )
            logits_output = result.logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class WorkerForwardStandaloneDraftWorker(StandaloneDraftWorker):
    """Forwards through the draft TpModelWorker and lets it plan."""

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
            # A fresh init_new batch is unplanned; ModelRunner plans it after
            # its own MLP-sync padding.
            result = self.draft_worker.forward_batch_generation(
                batch=None, forward_batch=forward_batch
            )
            logits_output = result.logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )
