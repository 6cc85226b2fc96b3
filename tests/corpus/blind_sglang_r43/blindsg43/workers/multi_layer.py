"""Multi-layer (per-step MTP layer) draft worker extensions.

Each draft step has its own ``ModelRunner`` and attention backend
(``draft_runner_list[step]``); the draft-extend pass walks them in order.
"""

from __future__ import annotations

from typing import List

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.utils import require_mlp_sync


class ForkMultiLayerDraftWorker(MultiLayerEagleDraftWorker):
    def _bind_step_pools(self, forward_batch: ForwardBatch, step: int) -> None:
        runner = self.draft_runner_list[step]
        forward_batch.req_to_token_pool = runner.req_to_token_pool
        forward_batch.token_to_kv_pool = runner.token_to_kv_pool

    # expect: SG106
    def draft_extend_steps(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        assert forward_batch.forward_mode.is_draft_extend_v2()
        logits: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            runner = self.draft_runner_list[step]
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            out = runner.forward(forward_batch).logits_output
            logits.append(out.next_token_logits[select_index])
        return logits

    # expect: clean
    def draft_extend_steps_runner_plan(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        assert forward_batch.forward_mode.is_draft_extend_v2()
        logits: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            runner = self.draft_runner_list[step]
            runner.attn_backend.init_forward_metadata(forward_batch)
            out = runner.forward(forward_batch).logits_output
            logits.append(out.next_token_logits[select_index])
        return logits

    # expect: clean
    def draft_extend_steps_local(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        assert forward_batch.forward_mode.is_draft_extend_v2()
        mark = not require_mlp_sync()
        logits: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            runner = self.draft_runner_list[step]
            runner.attn_backend.init_forward_metadata(forward_batch)
            if mark:
                forward_batch.mark_forward_metadata_ready()
            else:
                forward_batch.forward_metadata_ready = False
            out = runner.forward(forward_batch).logits_output
            logits.append(out.next_token_logits[select_index])
        return logits

    # expect: SG106
    def draft_extend_planned_list(
        self, step_batches: List[ForwardBatch], select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        """One batch per step, all planned up front on the plan stream."""
        planned: List[ForwardBatch] = []
        with self.plan_stream_ctx:
            for step, forward_batch in enumerate(step_batches):
                assert forward_batch.forward_mode.is_draft_extend_v2()
                self._bind_step_pools(forward_batch, step)
                self.draft_runner_list[step].attn_backend.init_forward_metadata(
                    forward_batch
                )
                forward_batch.mark_forward_metadata_ready()
                planned.append(forward_batch)
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        logits: List[torch.Tensor] = []
        for step, forward_batch in enumerate(planned):
            out = self.draft_runner_list[step].forward(forward_batch).logits_output
            logits.append(out.next_token_logits[select_index])
        return logits
