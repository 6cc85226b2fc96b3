"""Multi-layer EAGLE (MTP) draft worker with an eager DP draft-extend path."""

from __future__ import annotations

from typing import List, Optional

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)

from blindsg4.dp.sync import attach_dp_token_counts


class EagerDPMultiLayerDraftWorker(MultiLayerEagleDraftWorker):
    _staged_forward_batch: Optional[ForwardBatch] = None

    def _bind_step(self, forward_batch: ForwardBatch, step: int):
        runner = self.draft_runner_list[step]
        forward_batch.req_to_token_pool = runner.req_to_token_pool
        forward_batch.token_to_kv_pool = runner.token_to_kv_pool
        return runner

    def _draft_extend_local(self, forward_batch: ForwardBatch) -> List:
        outs = []
        for step in range(self.speculative_num_steps):
            runner = self._bind_step(forward_batch, step)
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            outs.append(runner.forward(forward_batch).logits_output)
        return outs

    # expect: SG106
    def draft_extend_per_step_marked(self, forward_batch: ForwardBatch) -> List:
        if forward_batch.global_num_tokens_cpu is None:
            return self._draft_extend_local(forward_batch)
        outs = []
        for step in range(self.speculative_num_steps):
            runner = self._bind_step(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            outs.append(runner.forward(forward_batch).logits_output)
        return outs

    # expect: clean
    def draft_extend_per_step(self, forward_batch: ForwardBatch) -> List:
        if forward_batch.global_num_tokens_cpu is None:
            return self._draft_extend_local(forward_batch)
        outs = []
        for step in range(self.speculative_num_steps):
            runner = self._bind_step(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                # Left unmarked: each step's forward re-plans post-pad.
                runner.attn_backend.init_forward_metadata(forward_batch)
            outs.append(runner.forward(forward_batch).logits_output)
        return outs

    # -- staged variant: plan while the target verify is still in flight ----
    def _stage(self, batch: ScheduleBatch, forward_batch: ForwardBatch) -> None:
        attach_dp_token_counts(forward_batch, batch, self.speculative_num_draft_tokens)
        runner = self._bind_step(forward_batch, 0)
        if not forward_batch.forward_mode.is_idle():
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        self._staged_forward_batch = forward_batch

    def _stage_for_replan(
        self, batch: ScheduleBatch, forward_batch: ForwardBatch
    ) -> None:
        attach_dp_token_counts(forward_batch, batch, self.speculative_num_draft_tokens)
        runner = self._bind_step(forward_batch, 0)
        if not forward_batch.forward_mode.is_idle():
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        self._staged_forward_batch = forward_batch

    def _consume_staged(self):
        forward_batch = self._staged_forward_batch
        self._staged_forward_batch = None
        return self.draft_runner_list[0].forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_staged(self, batch: ScheduleBatch, forward_batch: ForwardBatch):
        self._stage(batch, forward_batch)
        return self._consume_staged()

    # expect: clean
    def draft_extend_staged_replan(
        self, batch: ScheduleBatch, forward_batch: ForwardBatch
    ):
        self._stage_for_replan(batch, forward_batch)
        return self._consume_staged()
