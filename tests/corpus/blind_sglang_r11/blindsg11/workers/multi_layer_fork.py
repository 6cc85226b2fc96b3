"""Multi-layer EAGLE draft extend without the per-step CUDA graphs.

Used on the long-context pool where the draft-extend buckets are never
captured; each MTP layer has its own ModelRunner (and attention backend).
"""

from __future__ import annotations

from typing import List

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.utils.common import fast_topk


class EagerMultiLayerDraftWorker(MultiLayerEagleDraftWorker):
    def _bind_step_pools(self, forward_batch: ForwardBatch, step: int):
        runner = self.draft_runner_list[step]
        forward_batch.req_to_token_pool = runner.req_to_token_pool
        forward_batch.token_to_kv_pool = runner.token_to_kv_pool
        return runner

    def _advance(self, forward_batch, logits_sel, select_index):
        probs = torch.softmax(logits_sel, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        forward_batch.input_ids[select_index] = topk_index.flatten()
        return topk_p, topk_index

    # expect: SG106
    def run_extend_steps(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        topk_ps: List[torch.Tensor] = []
        topk_indices: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            runner = self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                # Every step owns its backend and we plan it right here, so the
                # runner's own init would just redo the same work.
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            out = runner.forward(forward_batch).logits_output
            topk_p, topk_index = self._advance(
                forward_batch, out.next_token_logits[select_index], select_index
            )
            topk_ps.append(topk_p)
            topk_indices.append(topk_index)
            forward_batch.spec_info.hidden_states = out.hidden_states
        return torch.cat(topk_ps, dim=1), torch.cat(topk_indices, dim=1)

    # expect: clean
    def run_extend_steps_unmarked(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ):
        topk_ps: List[torch.Tensor] = []
        topk_indices: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            runner = self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
            # Left unmarked: with DP attention the runner pads the batch and
            # must plan the padded shape on its own backend.
            out = runner.forward(forward_batch).logits_output
            topk_p, topk_index = self._advance(
                forward_batch, out.next_token_logits[select_index], select_index
            )
            topk_ps.append(topk_p)
            topk_indices.append(topk_index)
            forward_batch.spec_info.hidden_states = out.hidden_states
        return torch.cat(topk_ps, dim=1), torch.cat(topk_indices, dim=1)
