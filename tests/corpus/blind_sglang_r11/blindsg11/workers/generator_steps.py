"""Streaming draft steps: the tree builder consumes draft logits step by step
so it can stop early once the cumulative score falls below a threshold."""

from __future__ import annotations

from typing import Iterator

import torch

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import fast_topk, require_mlp_sync


class StreamingDraftWorker(EagleDraftWorker):
    early_stop_score: float = 1e-3

    # expect: SG106
    def _iter_draft_steps(
        self, forward_batch: ForwardBatch
    ) -> Iterator[LogitsProcessorOutput]:
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        for i in range(self.speculative_num_steps - 1):
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                out = self.draft_runner.forward(forward_batch).logits_output
            yield out
            forward_batch.positions.add_(1)

    # expect: clean
    def _iter_draft_steps_unsynced(
        self, forward_batch: ForwardBatch
    ) -> Iterator[LogitsProcessorOutput]:
        if not require_mlp_sync():
            # No MLP-sync padding inside the runner: the pre-plan stays valid.
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        for i in range(self.speculative_num_steps - 1):
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                out = self.draft_runner.forward(forward_batch).logits_output
            yield out
            forward_batch.positions.add_(1)

    def draft_streaming(self, forward_batch: ForwardBatch, unsynced: bool = False):
        steps = (
            self._iter_draft_steps_unsynced(forward_batch)
            if unsynced
            else self._iter_draft_steps(forward_batch)
        )
        topk_p_list, topk_index_list = [], []
        for out in steps:
            probs = torch.softmax(out.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
            forward_batch.input_ids = topk_index.flatten()
            forward_batch.spec_info.hidden_states = out.hidden_states
            if topk_p.max().item() < self.early_stop_score:
                break
        return topk_p_list, topk_index_list
