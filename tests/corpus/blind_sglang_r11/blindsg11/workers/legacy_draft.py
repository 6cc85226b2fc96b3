"""Draft loop ported from our 0.5.6 branch (EAGLEWorker.draft_forward).

Kept for the adaptive-topk experiment, which still relies on the old
per-step ``skip_attn_backend_init`` contract.
"""

from __future__ import annotations

from typing import List

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.common import fast_topk


class LegacyLoopDraftWorker(EagleDraftWorker):
    def _legacy_loop(self, forward_batch: ForwardBatch, skip_init: bool):
        spec_info = forward_batch.spec_info
        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
        )
        out_cache_loc = forward_batch.out_cache_loc.reshape(
            forward_batch.batch_size, self.topk, self.speculative_num_steps
        )
        out_cache_loc = out_cache_loc.permute((2, 0, 1)).reshape(
            self.speculative_num_steps, -1
        )
        score_list: List[torch.Tensor] = []
        token_list: List[torch.Tensor] = []
        parents_list: List[torch.Tensor] = []
        scores = None
        for i in range(self.speculative_num_steps):
            input_ids, hidden_states, scores, tree_info = select_top_k_tokens(
                i, topk_p, topk_index, hidden_states, scores, self.topk
            )
            score_list.append(tree_info[0])
            token_list.append(tree_info[1])
            parents_list.append(tree_info[2])
            if i == self.speculative_num_steps - 1:
                break
            forward_batch.input_ids = input_ids
            forward_batch.out_cache_loc = out_cache_loc[i]
            forward_batch.positions.add_(1)
            spec_info.hidden_states = hidden_states
            logits_output = self.draft_runner.forward(
                forward_batch, skip_attn_backend_init=skip_init
            ).logits_output
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            hidden_states = logits_output.hidden_states
        return organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )

    # expect: SG106
    def draft_forward_legacy(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle() and self.speculative_num_steps > 1:
            # Skip attention backend init for idle mode or 1-step draft
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        return self._legacy_loop(forward_batch, skip_init=True)

    # expect: clean
    def draft_forward_legacy_synced(self, forward_batch: ForwardBatch):
        preplanned = (
            not forward_batch.forward_mode.is_idle()
            and self.speculative_num_steps > 1
            and forward_batch.global_num_tokens_cpu is None
        )
        if preplanned:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        # MLP-sync batches are padded inside forward and plan there.
        return self._legacy_loop(forward_batch, skip_init=preplanned)
