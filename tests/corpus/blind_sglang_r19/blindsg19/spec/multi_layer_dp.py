"""Eager draft-extend step loops for multi-layer EAGLE (one MTP layer per
step, each with its own ModelRunner and attention backend)."""

from __future__ import annotations

from typing import List, Tuple

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.multi_layer_eagle_utils import rotate_input_ids
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.utils.common import fast_topk, require_mlp_sync


def _step_topk(logits: torch.Tensor, topk: int) -> Tuple[torch.Tensor, torch.Tensor]:
    probs = torch.softmax(logits, dim=-1)
    return fast_topk(probs, topk, dim=-1)


class MarkedMultiLayerEagleDraftWorker(MultiLayerEagleDraftWorker):
    def _bind_step_pools(self, forward_batch: ForwardBatch, step: int) -> None:
        runner = self.draft_runner_list[step]
        forward_batch.req_to_token_pool = runner.req_to_token_pool
        forward_batch.token_to_kv_pool = runner.token_to_kv_pool

    # expect: SG106
    def _run_eager_draft_extend_steps(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                # Each de-tied runner owns its backend: plan it here and tell
                # its forward the batch is already planned.
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            out = runner.forward(forward_batch).logits_output
            topk_p, topk_index = _step_topk(
                out.next_token_logits[select_index], self.topk
            )
            if self.chain_mtp_hidden_states and out.hidden_states is not None:
                forward_batch.spec_info.hidden_states = out.hidden_states
            if step < self.speculative_num_steps - 1:
                rotate_input_ids(
                    forward_batch.input_ids,
                    forward_batch.extend_start_loc,
                    forward_batch.extend_seq_lens,
                    topk_index,
                    select_index,
                )
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return topk_p_list, topk_index_list

    # expect: clean
    def _run_eager_draft_extend_steps_unmarked(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                # Warm this runner's wrapper plan; the batch stays unmarked,
                # so the forward plans again on the post-pad shape.
                runner.attn_backend.init_forward_metadata(forward_batch)
            out = runner.forward(forward_batch).logits_output
            topk_p, topk_index = _step_topk(
                out.next_token_logits[select_index], self.topk
            )
            if step < self.speculative_num_steps - 1:
                rotate_input_ids(
                    forward_batch.input_ids,
                    forward_batch.extend_start_loc,
                    forward_batch.extend_seq_lens,
                    topk_index,
                    select_index,
                )
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return topk_p_list, topk_index_list

    # expect: clean
    def _run_eager_draft_extend_steps_sync_aware(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        # Only a batch that the runner will not pad may keep a host plan.
        keep_host_plan = not require_mlp_sync()
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            self._bind_step_pools(forward_batch, step)
            if keep_host_plan and not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            else:
                forward_batch.forward_metadata_ready = False
            out = runner.forward(forward_batch).logits_output
            topk_p, topk_index = _step_topk(
                out.next_token_logits[select_index], self.topk
            )
            if step < self.speculative_num_steps - 1:
                rotate_input_ids(
                    forward_batch.input_ids,
                    forward_batch.extend_start_loc,
                    forward_batch.extend_seq_lens,
                    topk_index,
                    select_index,
                )
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return topk_p_list, topk_index_list
