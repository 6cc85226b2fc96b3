"""Tree drafter on top of the standalone (separate draft model) worker.

Parts of this file were first written against SGLang 0.5.6 (``EAGLEWorker``,
``skip_attn_backend_init=True``) and ported to the v2 workers.
"""

from __future__ import annotations

from typing import List, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker
from sglang.srt.utils.common import fast_topk, require_mlp_sync

from blindsg27.spec import batching


class TreeDraftWorker(StandaloneDraftWorker):
    """Standalone draft model with a wider draft tree."""

    # ---------------------------------------------------------------- helpers
    def _extend_batch_for_prefill(
        self, batch: ScheduleBatch, target_hidden_states: Optional[torch.Tensor]
    ) -> ForwardBatch:
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=target_hidden_states,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            return_hidden_states_before_norm=False,
        )
        forward_batch.return_logprob = False
        return forward_batch

    def _after_extend(self, logits_output, next_token_ids):
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        return EagleDraftInput(
            topk_p=topk_p,
            topk_index=topk_index,
            hidden_states=logits_output.hidden_states,
            bonus_tokens=next_token_ids,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )

    # ------------------------------------------------------------------ cases
    # idiom: eagle_worker.EAGLEWorker.draft + draft_forward (0.5.6: init_forward_metadata, then forward(skip_attn_backend_init=True) per step)
    # expect: SG106
    def forward_draft_decode_legacy(self, forward_batch: ForwardBatch):
        spec_info: EagleDraftInput = forward_batch.spec_info
        if not forward_batch.forward_mode.is_idle() and self.speculative_num_steps > 1:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        out_cache_loc = forward_batch.out_cache_loc.reshape(
            forward_batch.batch_size, self.topk, self.speculative_num_steps
        )
        out_cache_loc = out_cache_loc.permute((2, 0, 1)).reshape(
            self.speculative_num_steps, -1
        )
        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
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

    # idiom: eagle_worker.EAGLEWorker.forward_draft_extend_after_decode (0.5.6: init_forward_metadata, then forward(skip_attn_backend_init=True))
    # expect: SG106
    def forward_draft_extend_after_decode(self, forward_batch: ForwardBatch):
        can_cuda_graph = (
            self.cuda_graph_runner_for_draft_extend is not None
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_cuda_graph:
            return self.cuda_graph_runner_for_draft_extend.execute(forward_batch, None)
        forward_batch.can_run_dp_cuda_graph = False
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.draft_runner.forward(
            forward_batch, skip_attn_backend_init=True
        ).logits_output

    # idiom: dflash_worker_v2.DFlashWorkerV2 verify pattern applied to draft extend (skip_attn_backend_init=None under MLP sync, else True)
    # expect: clean
    def forward_draft_extend_after_decode_dp_safe(self, forward_batch: ForwardBatch):
        can_cuda_graph = (
            self.cuda_graph_runner_for_draft_extend is not None
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_cuda_graph:
            return self.cuda_graph_runner_for_draft_extend.execute(forward_batch, None)
        mlp_sync = require_mlp_sync()
        if not mlp_sync and not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.draft_runner.forward(
            forward_batch,
            skip_attn_backend_init=None if mlp_sync else True,
        ).logits_output

    # idiom: tp_worker.TpModelWorker.forward_batch_generation(forward_batch=...) on a draft prefill pre-planned by a helper module
    # expect: SG106
    def _draft_prefill_via_tp_worker(
        self, batch: ScheduleBatch, target_hidden_states, next_token_ids
    ):
        forward_batch = self._extend_batch_for_prefill(batch, target_hidden_states)
        batching.preplan(self.draft_runner.attn_backend, forward_batch)
        result = self.draft_worker.forward_batch_generation(
            batch=None, forward_batch=forward_batch
        )
        return self._after_extend(result.logits_output, next_token_ids)

    # idiom: tp_worker.TpModelWorker.forward_batch_generation with a helper that pre-plans only when require_mlp_sync() is off
    # expect: clean
    def _draft_prefill_via_tp_worker_local(
        self, batch: ScheduleBatch, target_hidden_states, next_token_ids
    ):
        forward_batch = self._extend_batch_for_prefill(batch, target_hidden_states)
        batching.maybe_preplan_for_local_batch(self.draft_runner.attn_backend, forward_batch)
        result = self.draft_worker.forward_batch_generation(
            batch=None, forward_batch=forward_batch
        )
        return self._after_extend(result.logits_output, next_token_ids)

    # idiom: forward_batch_info.ForwardBatch.forward_metadata_ready set by hand after planning a draft prefill
    # expect: SG106
    def _draft_prefill_marked_directly(
        self, batch: ScheduleBatch, target_hidden_states, next_token_ids
    ):
        forward_batch = self._extend_batch_for_prefill(batch, target_hidden_states)
        if forward_batch.forward_mode.is_extend():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.forward_metadata_ready = True
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._after_extend(logits_output, next_token_ids)

    # idiom: forward_batch_info.ForwardBatch.apply_deprecated_skip_attn_backend_init(planned) after planning a draft prefill (bug on the planned, non-idle path)
    # expect: SG106
    def _draft_prefill_deprecated_mark(
        self, batch: ScheduleBatch, target_hidden_states, next_token_ids
    ):
        forward_batch = self._extend_batch_for_prefill(batch, target_hidden_states)
        planned = False
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            planned = True
        forward_batch.apply_deprecated_skip_attn_backend_init(planned)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._after_extend(logits_output, next_token_ids)

    # idiom: tp_worker.TpModelWorker.forward_batch_generation(skip_attn_backend_init=...) for a one-step draft decode, skipping only without MLP sync
    # expect: clean
    def _draft_decode_single_step(self, forward_batch: ForwardBatch):
        local_only = not require_mlp_sync()
        if local_only and not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        result = self.draft_worker.forward_batch_generation(
            batch=None,
            forward_batch=forward_batch,
            skip_attn_backend_init=True if local_only else None,
        )
        return result.logits_output
