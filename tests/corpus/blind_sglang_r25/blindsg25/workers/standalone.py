"""Standalone (separate small model) draft worker, topk == 1 chain drafting."""

from __future__ import annotations

import logging

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_info import EagleDraftInput
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker

logger = logging.getLogger(__name__)


class ForkStandaloneDraftWorker(StandaloneDraftWorker):
    """Greedy chain drafting for the standalone draft model."""

    def _sample_only(self, draft_input: EagleDraftInput, bs: int):
        # 1-step draft: the draft-extend top-k already is the whole chain.
        draft_tokens = draft_input.topk_index.reshape(bs, 1)
        parent_list = self._topk1_parents_prealloc[:bs]
        top_scores_index = self._topk1_score_indices_prealloc[:bs]
        return parent_list, top_scores_index, draft_tokens

    def _chain_step(self, forward_batch: ForwardBatch, input_ids: torch.Tensor, step: int):
        forward_batch.input_ids = input_ids
        forward_batch.out_cache_loc = self._step_cache_loc[step]
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        next_ids = torch.argmax(logits_output.next_token_logits, dim=-1)
        forward_batch.positions.add_(1)
        return next_ids

    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        # idiom: speculative/standalone_worker_v2.py + eagle_worker_v2.py EagleDraftWorker.draft (chain, early return)
        # expect: SG106
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_graph, kv_loc_plan = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        bs = forward_batch.batch_size
        if self.speculative_num_steps == 1 or forward_batch.forward_mode.is_idle():
            return self._sample_only(draft_input, bs)
        if can_run_graph:
            parent_list, top_scores_index, draft_tokens, _ = self.cuda_graph_runner.execute(
                forward_batch
            )
            return parent_list, top_scores_index, draft_tokens

        self._step_cache_loc = forward_batch.out_cache_loc.reshape(
            bs, self.speculative_num_steps
        ).t()
        tokens = [draft_input.topk_index.flatten()]
        for step in range(self.speculative_num_steps - 1):
            # Chain on the runner's own backend; plan here so the forward
            # does not plan the same step twice.
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            tokens.append(self._chain_step(forward_batch, tokens[-1], step))
            forward_batch.seq_lens = forward_batch.seq_lens + 1
            if forward_batch.seq_lens_cpu is not None:
                forward_batch.seq_lens_cpu = forward_batch.seq_lens_cpu + 1
            forward_batch.seq_lens_sum += bs
        draft_tokens = torch.stack(tokens, dim=1)
        return (
            self._topk1_parents_prealloc[:bs],
            self._topk1_score_indices_prealloc[:bs],
            draft_tokens,
        )

    def _draft_chain_single_backend(self, batch: ScheduleBatch):
        # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft_forward (chain on one backend, re-planned per step)
        # expect: clean
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, _, _ = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            None,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        bs = forward_batch.batch_size
        if self.speculative_num_steps == 1 or forward_batch.forward_mode.is_idle():
            return self._sample_only(draft_input, bs)
        self._step_cache_loc = forward_batch.out_cache_loc.reshape(
            bs, self.speculative_num_steps
        ).t()
        tokens = [draft_input.topk_index.flatten()]
        for step in range(self.speculative_num_steps - 1):
            # Plain decode metadata on the runner's own backend: identical to
            # what ModelRunner plans, so a post-pad re-plan is equivalent.
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            tokens.append(self._chain_step(forward_batch, tokens[-1], step))
            forward_batch.seq_lens = forward_batch.seq_lens + 1
            if forward_batch.seq_lens_cpu is not None:
                forward_batch.seq_lens_cpu = forward_batch.seq_lens_cpu + 1
            forward_batch.seq_lens_sum += bs
        draft_tokens = torch.stack(tokens, dim=1)
        return (
            self._topk1_parents_prealloc[:bs],
            self._topk1_score_indices_prealloc[:bs],
            draft_tokens,
        )
