"""Fork multi-layer EAGLE (MTP chain) draft extend, eager path.

Each MTP layer has its own ModelRunner and draft-extend attention backend
(``draft_extend_attn_backend_list[step]`` is ``draft_runner_list[step].attn_backend``).
"""

from __future__ import annotations

from typing import List, Tuple

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.utils.common import fast_topk


class ForkMultiLayerEagleDraftWorker(MultiLayerEagleDraftWorker):
    """Eager chain extend that plans every layer's backend up front."""

    # expect: SG106
    def _eager_chain_extend(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        if not forward_batch.forward_mode.is_idle():
            # Plan all layers once; the per-layer loop is then launch-only.
            for backend in self.draft_extend_attn_backend_list:
                backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        topk_p_list: List[torch.Tensor] = []
        topk_index_list: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            logits_output = runner.forward(forward_batch).logits_output
            probs = torch.softmax(logits_output.next_token_logits[select_index], dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            if (
                self.chain_mtp_hidden_states
                and step < self.speculative_num_steps - 1
                and logits_output.hidden_states is not None
            ):
                forward_batch.spec_info.hidden_states = logits_output.hidden_states
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return torch.cat(topk_p_list, dim=1), torch.cat(topk_index_list, dim=1)


class PerLayerPlanMultiLayerEagleDraftWorker(MultiLayerEagleDraftWorker):
    """Eager chain extend where each layer's forward plans post-pad."""

    # expect: clean
    def _eager_chain_extend(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        topk_p_list: List[torch.Tensor] = []
        topk_index_list: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                # Warm this layer's plan; left unmarked so the forward re-plans
                # the (possibly DP-padded) batch on the same backend.
                runner.attn_backend.init_forward_metadata(forward_batch)
            logits_output = runner.forward(forward_batch).logits_output
            probs = torch.softmax(logits_output.next_token_logits[select_index], dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            if (
                self.chain_mtp_hidden_states
                and step < self.speculative_num_steps - 1
                and logits_output.hidden_states is not None
            ):
                forward_batch.spec_info.hidden_states = logits_output.hidden_states
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return torch.cat(topk_p_list, dim=1), torch.cat(topk_index_list, dim=1)
