"""Multi-layer (per-step MTP head) EAGLE draft extend, eager fallback paths."""

from __future__ import annotations

import logging
from typing import List, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft_extend
from sglang.srt.speculative.multi_layer_eagle_utils import rotate_input_ids
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.utils.common import fast_topk

logger = logging.getLogger(__name__)


class _StepBatchMixin:
    def _build_step_batch(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ) -> ForwardBatch:
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_tokens_per_req=self.speculative_num_steps + 1,
            num_tokens_for_logprob_per_req=1,
        )
        return prepare_for_draft_extend(
            draft_extend_input,
            batch,
            batch_result.next_token_ids,
            self.speculative_num_draft_tokens,
            self.draft_runner_list[0],
            None,
            return_hidden_states_before_norm=True,
        )


class EagerMultiLayerDraftWorker(_StepBatchMixin, MultiLayerEagleDraftWorker):
    # expect: SG106
    def run_eager_mtp_steps(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        topk_index_list = []
        for step in range(self.speculative_num_steps):
            runner = self.mtp_model_runner(step)
            if step > 0:
                rotate_input_ids(
                    forward_batch.input_ids,
                    forward_batch.extend_start_loc,
                    forward_batch.extend_seq_lens,
                    topk_index_list[-1].flatten(),
                )
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            logits_output = runner.forward(forward_batch).logits_output
            forward_batch.spec_info.hidden_states = logits_output.hidden_states
            probs = torch.softmax(
                logits_output.next_token_logits[select_index], dim=-1
            )
            _, topk_index = fast_topk(probs, self.topk, dim=-1)
            topk_index_list.append(topk_index)
        return topk_index_list

    # expect: clean
    def run_eager_mtp_steps_replannable(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        topk_index_list = []
        for step in range(self.speculative_num_steps):
            runner = self.mtp_model_runner(step)
            if step > 0:
                rotate_input_ids(
                    forward_batch.input_ids,
                    forward_batch.extend_start_loc,
                    forward_batch.extend_seq_lens,
                    topk_index_list[-1].flatten(),
                )
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            logits_output = runner.forward(forward_batch).logits_output
            forward_batch.spec_info.hidden_states = logits_output.hidden_states
            probs = torch.softmax(
                logits_output.next_token_logits[select_index], dim=-1
            )
            _, topk_index = fast_topk(probs, self.topk, dim=-1)
            topk_index_list.append(topk_index)
        return topk_index_list


class StagedMultiLayerDraftWorker(_StepBatchMixin, MultiLayerEagleDraftWorker):
    """Stages the first MTP step's metadata on the plan stream, then runs it."""

    _staged_batch: Optional[ForwardBatch] = None

    def _stage_first_step(self, forward_batch: ForwardBatch) -> None:
        backend = self.draft_extend_attn_backend_list[0]
        if backend is not None and not forward_batch.forward_mode.is_idle():
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        self._staged_batch = forward_batch

    def _stage_first_step_padded(self, forward_batch: ForwardBatch) -> None:
        backend = self.draft_extend_attn_backend_list[0]
        if backend is not None and not forward_batch.forward_mode.is_idle():
            if forward_batch.global_num_tokens_cpu is not None:
                forward_batch.prepare_mlp_sync_batch(self.draft_runner_list[0])
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        self._staged_batch = forward_batch

    def _run_staged_first_step(self):
        forward_batch, self._staged_batch = self._staged_batch, None
        return self.draft_runner_list[0].forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_first_step(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        with self.plan_stream_ctx:
            self._stage_first_step(self._build_step_batch(batch, batch_result))
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        return self._run_staged_first_step()

    # expect: clean
    def draft_extend_first_step_padded(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        with self.plan_stream_ctx:
            self._stage_first_step_padded(self._build_step_batch(batch, batch_result))
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        return self._run_staged_first_step()


class GuardedMultiLayerDraftWorker(MultiLayerEagleDraftWorker):
    # expect: SG106
    def run_head_step(self, forward_batch: ForwardBatch, step: int):
        runner = self.mtp_model_runner(step)
        backend = self.draft_extend_attn_backend_list[step]
        saved_positions = forward_batch.positions.clone()
        try:
            if backend is not None:
                backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            return runner.forward(forward_batch).logits_output
        finally:
            forward_batch.positions = saved_positions

    # expect: clean
    def run_head_step_unmarked(self, forward_batch: ForwardBatch, step: int):
        runner = self.mtp_model_runner(step)
        saved_positions = forward_batch.positions.clone()
        try:
            return runner.forward(forward_batch).logits_output
        finally:
            forward_batch.positions = saved_positions
