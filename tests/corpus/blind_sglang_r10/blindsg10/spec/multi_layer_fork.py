"""Multi-layer (de-tied MTP) EAGLE draft worker: eager chain draft extend.

The fork keeps the eager chain for batch sizes outside the captured extend
graphs; each MTP layer has its own runner and attention backend.
"""

from __future__ import annotations

from typing import List, Tuple

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.utils.common import fast_topk

from blindsg10.common.planning import iter_preplanned_steps, iter_step_runners


class ForkMultiLayerEagleDraftWorker(MultiLayerEagleDraftWorker):
    def _step_topk(self, logits_output, select_index: torch.Tensor):
        probs = torch.softmax(logits_output.next_token_logits[select_index], dim=-1)
        return fast_topk(probs, self.topk, dim=-1)

    @staticmethod
    def _stack(topk_p_list: List[torch.Tensor], topk_index_list: List[torch.Tensor]):
        return torch.cat(topk_p_list, dim=1), torch.cat(topk_index_list, dim=1)

    # expect: SG106
    def _eager_chain_extend_marked(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                # This step's runner planned its own backend just above.
                forward_batch.mark_forward_metadata_ready()
            logits_output = runner.forward(forward_batch).logits_output
            topk_p, topk_index = self._step_topk(logits_output, select_index)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
            forward_batch.spec_info.hidden_states = logits_output.hidden_states
        return self._stack(topk_p_list, topk_index_list)

    # expect: clean
    def _eager_chain_extend(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        topk_p_list, topk_index_list = [], []
        # Left unmarked: only runner[0]'s backend could have been pre-planned,
        # so every step's forward plans its own metadata after the pad.
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
            logits_output = runner.forward(forward_batch).logits_output
            topk_p, topk_index = self._step_topk(logits_output, select_index)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
            forward_batch.spec_info.hidden_states = logits_output.hidden_states
        return self._stack(topk_p_list, topk_index_list)

    # expect: SG106
    def _eager_chain_extend_preplanned(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        topk_p_list, topk_index_list = [], []
        for _step, runner in iter_preplanned_steps(
            self.draft_runner_list[: self.speculative_num_steps], forward_batch
        ):
            logits_output = runner.forward(forward_batch).logits_output
            topk_p, topk_index = self._step_topk(logits_output, select_index)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
            forward_batch.spec_info.hidden_states = logits_output.hidden_states
        return self._stack(topk_p_list, topk_index_list)

    # expect: clean
    def _eager_chain_extend_pools_only(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        topk_p_list, topk_index_list = [], []
        for _step, runner in iter_step_runners(
            self.draft_runner_list[: self.speculative_num_steps], forward_batch
        ):
            logits_output = runner.forward(forward_batch).logits_output
            topk_p, topk_index = self._step_topk(logits_output, select_index)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
            forward_batch.spec_info.hidden_states = logits_output.hidden_states
        return self._stack(topk_p_list, topk_index_list)
