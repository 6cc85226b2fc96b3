"""Spec-v2 worker glue for the overlap scheduler's ``FutureMap`` relay.

In overlap mode the previous iteration's sampled tokens and draft extras are
only materialised at forward entry (``resolve_forward_inputs``).  These
methods resolve them first and then run the usual draft-extend / verify
steps of ``EAGLEWorkerV2``.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.managers.overlap_utils import FutureMap, resolve_forward_inputs
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_utils import eagle_prepare_for_verify
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2


class ForkEagleWorkerV2(EAGLEWorkerV2):
    """EAGLE spec-v2 worker that resolves FutureMap relays itself."""

    def _draft_extend_batch(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ) -> ForwardBatch:
        draft_worker = self.draft_worker
        ndt = self.speculative_num_draft_tokens
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=ndt,
            num_tokens_for_logprob_per_req=ndt,
        )
        batch.input_ids = batch_result.next_token_ids.to(torch.int64)
        bs = len(batch.seq_lens)
        batch.prefix_lens = batch.seq_lens.to(torch.int32)
        batch.extend_lens = torch.full(
            (bs,), ndt, dtype=torch.int32, device=batch.seq_lens.device
        )
        batch.extend_num_tokens = bs * ndt
        batch.forward_mode = (
            ForwardMode.IDLE
            if batch.forward_mode.is_idle()
            else ForwardMode.DRAFT_EXTEND_V2
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            draft_worker.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )
        forward_batch.seq_lens = forward_batch.seq_lens + ndt
        return forward_batch

    # expect: SG106
    def draft_extend_from_future(
        self,
        batch: ScheduleBatch,
        future_map: FutureMap,
        batch_result: GenerationBatchResult,
    ) -> torch.Tensor:
        resolve_forward_inputs(batch, future_map)
        draft_runner = self.draft_worker.draft_runner
        forward_batch = self._draft_extend_batch(batch, batch_result)
        graph_runner = self.draft_worker.cuda_graph_runner_for_draft_extend
        select_index = (
            torch.arange(len(batch.seq_lens), device=self.device)
            * self.speculative_num_draft_tokens
            + batch_result.accept_lens
            - 1
        )
        if graph_runner and graph_runner.can_run_graph(forward_batch):
            return graph_runner.execute(forward_batch, select_index).next_token_logits
        with self.plan_stream_ctx:
            if not forward_batch.forward_mode.is_idle():
                draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        logits = draft_runner.forward(forward_batch).logits_output.next_token_logits
        return logits[select_index]

    # expect: clean
    def verify_with_future(
        self,
        batch: ScheduleBatch,
        future_map: FutureMap,
        pp_proxy_tensors=None,
    ) -> GenerationBatchResult:
        resolve_forward_inputs(batch, future_map)
        with self.plan_stream_ctx:
            verify_forward_batch, can_run_cuda_graph = eagle_prepare_for_verify(
                batch.spec_info,
                self.req_to_token_pool,
                batch,
                self.target_worker,
            )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        return self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
            pp_proxy_tensors=pp_proxy_tensors,
        )

    # expect: clean
    def draft_prefill_extend_preplanned(
        self,
        batch: ScheduleBatch,
        future_map: Optional[FutureMap] = None,
    ) -> torch.Tensor:
        """Draft-model extend over a freshly prefilled batch."""
        if future_map is not None:
            resolve_forward_inputs(batch, future_map)
        draft_runner = self.draft_worker.draft_runner
        forward_batch = ForwardBatch.init_new(
            batch,
            draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
        )
        forward_batch.return_logprob = False
        with self.plan_stream_ctx:
            if forward_batch.forward_mode.is_extend():
                draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        return draft_runner.forward(forward_batch).logits_output.next_token_logits
