"""Fork of the multi-layer (MTP) EAGLE draft worker: one runner per layer."""

from __future__ import annotations

from typing import List

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)


class ForkMultiLayerEagleDraftWorker(MultiLayerEagleDraftWorker):
    """MTP draft worker whose eager draft-extend chain is planned per runner."""

    draft_runner_list: List[ModelRunner]

    def _build_chain_batch(self, batch: ScheduleBatch) -> ForwardBatch:
        return ForwardBatch.init_new(
            batch,
            self.draft_runner_list[0],
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=True,
        )

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode (eager per-step runner loop)
    # expect: SG106
    def draft_extend_chain(self, batch: ScheduleBatch) -> List[torch.Tensor]:
        forward_batch = self._build_chain_batch(batch)
        step_logits: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            output = runner.forward(forward_batch)
            step_logits.append(output.logits_output.next_token_logits)
        return step_logits

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode ("left unmarked": each step's forward plans post-pad)
    # expect: clean
    def draft_extend_chain_unmarked(self, batch: ScheduleBatch) -> List[torch.Tensor]:
        forward_batch = self._build_chain_batch(batch)
        step_logits: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                # Warm the runner's backend; the batch stays unmarked so the
                # forward plans again once DP padding has run.
                runner.attn_backend.init_forward_metadata(forward_batch)
            output = runner.forward(forward_batch)
            step_logits.append(output.logits_output.next_token_logits)
        return step_logits
