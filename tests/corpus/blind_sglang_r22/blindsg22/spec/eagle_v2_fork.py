"""Fork of EAGLEWorkerV2: the draft-extend step that follows target verify."""

from __future__ import annotations

import torch

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import (
    EAGLEDraftExtendCudaGraphRunner,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft_extend
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker, EAGLEWorkerV2

from blindsg22.common.planning import stage_draft_extend, stage_draft_extend_plan


class ForkEAGLEWorkerV2(EAGLEWorkerV2):
    """EAGLE v2 worker whose draft extend after verify is planned by the fork."""

    _draft_worker: EagleDraftWorker

    def _draft_runner(self) -> ModelRunner:
        return self._draft_worker.draft_runner

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EAGLEWorkerV2.verify -> EagleDraftWorker._draft_extend_for_decode (plan-stream stage in a helper module)
    # expect: SG106
    def draft_extend_after_verify(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        draft_runner = self._draft_runner()
        with self.plan_stream_ctx:
            forward_batch = stage_draft_extend(draft_runner.attn_backend, forward_batch)
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        return draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EAGLEWorkerV2.verify -> draft extend, staging told not to pre-plan
    # expect: clean
    def draft_extend_after_verify_deferred(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        draft_runner = self._draft_runner()
        with self.plan_stream_ctx:
            forward_batch = stage_draft_extend(
                draft_runner.attn_backend, forward_batch, preplan=False
            )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        return draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (no draft-extend graph runner: plans and marks pre-pad) then ModelRunner.forward
    # expect: SG106
    def draft_extend_without_graph(
        self,
        batch: ScheduleBatch,
        draft_extend_input: EagleDraftExtendInput,
        next_token_ids: torch.Tensor,
    ) -> LogitsProcessorOutput:
        draft_runner = self._draft_runner()
        forward_batch = prepare_for_draft_extend(
            draft_extend_input,
            batch,
            next_token_ids,
            self.speculative_num_draft_tokens,
            draft_runner,
            None,
            return_hidden_states_before_norm=False,
        )
        return draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend, then eager fallback that pads and re-plans (ModelRunner._forward_raw order)
    # expect: clean
    def draft_extend_graph_or_replan(
        self,
        batch: ScheduleBatch,
        draft_extend_input: EagleDraftExtendInput,
        next_token_ids: torch.Tensor,
        select_index: torch.Tensor,
    ) -> LogitsProcessorOutput:
        draft_runner = self._draft_runner()
        graph_runner: EAGLEDraftExtendCudaGraphRunner = (
            self._draft_worker.cuda_graph_runner_for_draft_extend
        )
        forward_batch = prepare_for_draft_extend(
            draft_extend_input,
            batch,
            next_token_ids,
            self.speculative_num_draft_tokens,
            draft_runner,
            graph_runner,
            return_hidden_states_before_norm=False,
        )
        if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
            return graph_runner.execute(forward_batch, select_index)
        # The pre-pad plan is stale once DP padding reshapes the batch: pad,
        # plan again on the final shapes, and run the eager runner directly.
        draft_runner._prepare_eager_forward_batch(forward_batch)
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        logits_output = draft_runner.eager_runner.execute(forward_batch)
        forward_batch.post_forward_mlp_sync_batch(logits_output)
        return logits_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (plan record carried in a dataclass to the compute stream)
    # expect: SG106
    def draft_extend_from_plan_record(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        draft_runner = self._draft_runner()
        with self.plan_stream_ctx:
            plan = stage_draft_extend_plan(
                draft_runner.attn_backend, forward_batch, replan_equivalent=False
            )
        if plan.preplanned:
            plan.forward_batch.mark_forward_metadata_ready(
                replan_equivalent=plan.replan_equivalent
            )
        return draft_runner.forward(plan.forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (dataclass record says replan-equivalent)
    # expect: clean
    def draft_extend_from_replan_record(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        draft_runner = self._draft_runner()
        with self.plan_stream_ctx:
            plan = stage_draft_extend_plan(
                draft_runner.attn_backend, forward_batch, replan_equivalent=True
            )
        if plan.preplanned:
            plan.forward_batch.mark_forward_metadata_ready(
                replan_equivalent=plan.replan_equivalent
            )
        return draft_runner.forward(plan.forward_batch).logits_output
