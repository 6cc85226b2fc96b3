"""Draft paths ported from the spec-v1 worker (``eagle_worker.py``).

The v1 worker planned the draft backends itself and then called the runner
with ``skip_attn_backend_init=True``.  ``ModelRunner.forward`` still accepts
that keyword, so these ports keep the original call shapes.
"""

from __future__ import annotations

from functools import partial
from typing import List, Optional, Tuple

import torch

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils import require_mlp_sync
from sglang.srt.utils.common import fast_topk

from blindsg43.common.planning import LEGACY_PREPLANNED_FORWARD_KWARGS


class LegacyEagleDraftWorker(EagleDraftWorker):
    """EAGLE draft worker carrying the v1 draft-extend-after-decode flow."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._preplanned_forward_kwargs = dict(LEGACY_PREPLANNED_FORWARD_KWARGS)
        self._forward_preplanned = partial(
            self.draft_runner.forward, skip_attn_backend_init=True
        )

    def _draft_extend_batch(self, batch: ScheduleBatch) -> ForwardBatch:
        batch.forward_mode = (
            ForwardMode.DRAFT_EXTEND_V2
            if not batch.forward_mode.is_idle()
            else ForwardMode.IDLE
        )
        batch.return_hidden_states = False
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
        )
        if forward_batch.seq_lens_cpu is not None:
            forward_batch.seq_lens_sum = forward_batch.seq_lens_cpu.sum().item()
        else:
            forward_batch.seq_lens_sum = batch.seq_lens.sum().item()
        return forward_batch

    def _capture_for_decode(
        self, logits_output: LogitsProcessorOutput, forward_batch: ForwardBatch
    ) -> None:
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        draft_input = forward_batch.spec_info
        draft_input.topk_p, draft_input.topk_index = fast_topk(probs, self.topk, dim=-1)
        draft_input.hidden_states = logits_output.hidden_states

    # expect: SG106
    def forward_draft_extend_after_decode(self, batch: ScheduleBatch) -> None:
        seq_lens_backup = batch.seq_lens.clone()
        req_pool_indices_backup = batch.req_pool_indices
        input_is_idle = batch.forward_mode.is_idle()

        forward_batch = self._draft_extend_batch(batch)
        runner = self.cuda_graph_runner_for_draft_extend
        if runner and runner.can_run_graph(forward_batch):
            logits_output = runner.execute(
                forward_batch,
                torch.arange(forward_batch.batch_size, device=self.device),
            )
        else:
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            logits_output = self.draft_runner.forward(
                forward_batch, skip_attn_backend_init=True
            ).logits_output
        self._capture_for_decode(logits_output, forward_batch)

        batch.forward_mode = ForwardMode.IDLE if input_is_idle else ForwardMode.DECODE
        batch.seq_lens = seq_lens_backup
        batch.req_pool_indices = req_pool_indices_backup

    # expect: SG106
    def legacy_draft_forward(
        self, forward_batch: ForwardBatch
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        spec_info = forward_batch.spec_info
        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
        )
        if not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)

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

    # expect: SG106
    def draft_extend_with_kwargs(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        assert forward_batch.forward_mode.is_draft_extend_v2()
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.draft_runner.forward(
            forward_batch, **self._preplanned_forward_kwargs
        ).logits_output

    # expect: SG106
    def draft_extend_with_partial(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        assert forward_batch.forward_mode.is_draft_extend_v2()
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        return self._forward_preplanned(forward_batch).logits_output

    # expect: clean
    def draft_extend_legacy_sync(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        assert forward_batch.forward_mode.is_draft_extend_v2()
        preplanned = not require_mlp_sync()
        if preplanned:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.draft_runner.forward(
            forward_batch, skip_attn_backend_init=preplanned
        ).logits_output

    # expect: clean
    def draft_extend_legacy_graph(
        self, forward_batch: ForwardBatch, select_index: Optional[torch.Tensor] = None
    ) -> LogitsProcessorOutput:
        runner = self.cuda_graph_runner_for_draft_extend
        if select_index is None:
            select_index = torch.arange(forward_batch.batch_size, device=self.device)
        if runner and runner.can_run_graph(forward_batch):
            return runner.execute(forward_batch, select_index)
        logits_output = self.draft_runner.forward(
            forward_batch, skip_attn_backend_init=False
        ).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        if logits_output.hidden_states is not None:
            logits_output.hidden_states = logits_output.hidden_states[select_index]
        return logits_output
