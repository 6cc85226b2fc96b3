"""Multi-layer EAGLE (one MTP layer per draft step) fork workers.

Each draft step has its own ``ModelRunner`` (``draft_runner_list[step]``) and
its own draft-extend attention backend; the eager draft extend runs the chain
once per step over the same batch, rotating input ids in between.
"""

from __future__ import annotations

from typing import List, Tuple

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)


def _rotate_chain(forward_batch: ForwardBatch, next_ids: torch.Tensor, width: int):
    """Shift every request's window left by one and append its new token."""
    ids = forward_batch.input_ids.view(-1, width)
    ids[:, :-1] = ids[:, 1:].clone()
    ids[:, -1] = next_ids.view(-1)


class StagedMultiLayerDraftWorker(MultiLayerEagleDraftWorker):
    # expect: SG106
    def _draft_extend_eager(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        width = self.speculative_num_steps + 1
        topk_p_list, topk_index_list = [], []
        for step, runner in enumerate(self.draft_runner_list):
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                self.draft_extend_attn_backend_list[step].init_forward_metadata(
                    forward_batch
                )
                forward_batch.mark_forward_metadata_ready()
            logits = runner.forward(forward_batch).logits_output.next_token_logits
            probs = torch.softmax(logits[select_index], dim=-1)
            topk_p, topk_index = probs.topk(self.topk, dim=-1)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
            if step < self.speculative_num_steps - 1:
                _rotate_chain(forward_batch, topk_index, width)
        return topk_p_list, topk_index_list


class PerStepPlannedMultiLayerDraftWorker(MultiLayerEagleDraftWorker):
    # expect: clean
    def _draft_extend_eager(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        width = self.speculative_num_steps + 1
        topk_p_list, topk_index_list = [], []
        for step, runner in enumerate(self.draft_runner_list):
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            # Each de-tied runner has its own backend: drop any readiness mark
            # (prepare_for_draft_extend sets one) so this step's forward plans
            # its own metadata after the DP padding.
            forward_batch.forward_metadata_ready = False
            logits = runner.forward(forward_batch).logits_output.next_token_logits
            probs = torch.softmax(logits[select_index], dim=-1)
            topk_p, topk_index = probs.topk(self.topk, dim=-1)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
            if step < self.speculative_num_steps - 1:
                _rotate_chain(forward_batch, topk_index, width)
        return topk_p_list, topk_index_list
