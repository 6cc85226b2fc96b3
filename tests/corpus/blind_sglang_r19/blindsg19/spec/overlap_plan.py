"""Draft-extend with its host planning moved onto the overlap plan stream."""

from __future__ import annotations

from typing import Optional

import torch

from blindsg19.spec.draft_extend_prep import build_draft_extend_batch
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import (
    EAGLEDraftExtendCudaGraphRunner,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.spec_utils import get_plan_stream


class PlanStreamDraftExtend:
    def __init__(
        self,
        draft_runner: ModelRunner,
        graph_runner: Optional[EAGLEDraftExtendCudaGraphRunner],
        num_draft_tokens: int,
        device: str,
    ):
        self.draft_runner = draft_runner
        self.graph_runner = graph_runner
        self.num_draft_tokens = num_draft_tokens
        self.device = device
        self.plan_stream, self.plan_stream_ctx = get_plan_stream(device)

    def _extend_input(self, batch_result: GenerationBatchResult):
        return EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.num_draft_tokens,
            num_tokens_for_logprob_per_req=self.num_draft_tokens,
        )

    # expect: SG106
    def run(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        select_index: torch.Tensor,
    ):
        predict = batch_result.next_token_ids.to(torch.int64)
        device_module = torch.get_device_module(self.device)
        if self.plan_stream:
            self.plan_stream.wait_stream(device_module.current_stream())
        with self.plan_stream_ctx:
            forward_batch = build_draft_extend_batch(
                self._extend_input(batch_result),
                batch,
                predict,
                self.num_draft_tokens,
                self.draft_runner,
            )
            use_graph = self.graph_runner is not None and self.graph_runner.can_run_graph(
                forward_batch
            )
            if not use_graph and not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            device_module.current_stream().wait_stream(self.plan_stream)

        if use_graph:
            return self.graph_runner.execute(forward_batch, select_index)
        out = self.draft_runner.forward(forward_batch).logits_output
        out.next_token_logits = out.next_token_logits[select_index]
        return out

    # expect: clean
    def run_replannable(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        select_index: torch.Tensor,
    ):
        predict = batch_result.next_token_ids.to(torch.int64)
        device_module = torch.get_device_module(self.device)
        if self.plan_stream:
            self.plan_stream.wait_stream(device_module.current_stream())
        with self.plan_stream_ctx:
            forward_batch = build_draft_extend_batch(
                self._extend_input(batch_result),
                batch,
                predict,
                self.num_draft_tokens,
                self.draft_runner,
            )
            use_graph = self.graph_runner is not None and self.graph_runner.can_run_graph(
                forward_batch
            )
            if not use_graph and not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                # Same backend the runner plans with: a post-pad re-plan is
                # equivalent, so allow it.
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        if self.plan_stream:
            device_module.current_stream().wait_stream(self.plan_stream)

        if use_graph:
            return self.graph_runner.execute(forward_batch, select_index)
        out = self.draft_runner.forward(forward_batch).logits_output
        out.next_token_logits = out.next_token_logits[select_index]
        return out
