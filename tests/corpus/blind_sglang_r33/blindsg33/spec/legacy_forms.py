"""Older call forms kept from the lab's 0.5.6-era fork.

These still pass ``skip_attn_backend_init`` to the forward; on 0.5.23 the
kwarg is deprecated and mapped onto the ForwardBatch marker.
"""

from __future__ import annotations

import logging

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle_utils import (
    organize_draft_results,
    per_step_draft_out_cache_loc,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.common import fast_topk

logger = logging.getLogger(__name__)


class LegacyDraftWorker(EagleDraftWorker):
    # idiom: speculative/eagle_worker_v2.py (0.5.6) EagleDraftWorker.draft + draft_forward — plans draft_attn_backend up front, then each step calls draft_runner.forward(forward_batch, skip_attn_backend_init=True)
    # expect: SG106
    def draft_forward_legacy(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return None
        if self.speculative_num_steps > 1:
            self.draft_attn_backend.init_forward_metadata(forward_batch)

        spec_info = forward_batch.spec_info
        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
        )
        out_cache_loc = per_step_draft_out_cache_loc(
            forward_batch.out_cache_loc,
            forward_batch.batch_size,
            self.topk,
            self.speculative_num_steps,
        )
        score_list, token_list, parents_list = [], [], []
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
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                logits_output = self.draft_runner.forward(
                    forward_batch, skip_attn_backend_init=True
                ).logits_output
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            hidden_states = logits_output.hidden_states

        return organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )

    # idiom: speculative/eagle_worker_v2.py (0.5.6) EagleDraftWorker._draft_extend_for_decode — DRAFT_EXTEND_V2 batch planned on draft_runner.attn_backend, forward called with skip_attn_backend_init=True
    # expect: SG106
    def draft_extend_legacy(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        logits_output = self.draft_runner.forward(
            forward_batch, skip_attn_backend_init=True
        ).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        logits_output.hidden_states = logits_output.hidden_states[select_index]
        return logits_output

    # idiom: speculative/eagle_worker_v2.py (0.5.6) EAGLEWorkerV2.verify — TARGET_VERIFY batch planned like prepare_for_v2_verify (load_batch for graphs, init_forward_metadata otherwise), forward_batch_generation(..., is_verify=True, skip_attn_backend_init=True)
    # expect: clean
    def verify_legacy(self, verify_forward_batch: ForwardBatch):
        target_runner = self.target_worker.model_runner
        graph_runner = target_runner.decode_cuda_graph_runner
        if graph_runner and graph_runner.can_run_graph(verify_forward_batch):
            graph_runner.load_batch(verify_forward_batch)
        elif not verify_forward_batch.forward_mode.is_idle():
            target_runner.attn_backend.init_forward_metadata(verify_forward_batch)
        return self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
            skip_attn_backend_init=True,
        )

    # idiom: speculative/dflash_worker_v2.py forward_batch_generation (skip_attn_backend_init=None if attn_dp_enabled else True) — DRAFT_EXTEND_V2 batch planned, forward's skip flag chosen by attn_dp_enabled
    # expect: clean
    def draft_extend_flagged(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        logits_output = self.draft_runner.forward(
            forward_batch,
            skip_attn_backend_init=None if get_parallel().attn_dp_enabled else True,
        ).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        logits_output.hidden_states = logits_output.hidden_states[select_index]
        return logits_output
