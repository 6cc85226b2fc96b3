"""Frozen-KV MTP draft worker (draft attends the target's KV, writes none)."""

from __future__ import annotations

import logging

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.frozen_kv_mtp_info import FrozenKVMTPDraftInput
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.speculative.spec_utils import fast_topk, select_top_k_tokens
from sglang.srt.utils.async_probe import maybe_detect_nan
from sglang.srt.utils.common import require_mlp_sync

logger = logging.getLogger(__name__)


class ForkFrozenKVMTPDraftWorker(FrozenKVMTPDraftWorker):
    """Frozen-KV MTP with the seed iteration folded into the step loop."""

    def _seed_inputs(self, spec_info: FrozenKVMTPDraftInput):
        if self.topk > 1:
            return (
                spec_info.bonus_tokens.repeat_interleave(self.topk, dim=0),
                spec_info.hidden_states.repeat_interleave(self.topk, dim=0),
            )
        return spec_info.bonus_tokens, spec_info.hidden_states

    def _run_step(self, forward_batch: ForwardBatch):
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            return self.draft_model_runner.forward(forward_batch).logits_output

    def draft_forward(self, forward_batch: ForwardBatch):
        # idiom: speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward
        # expect: SG106
        spec_info = forward_batch.spec_info
        assert isinstance(spec_info, FrozenKVMTPDraftInput)
        score_list, token_list, parents_list = [], [], []

        # Seed + recurrent iters share one rope position; one init covers all.
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)

        seed_input_ids, seed_prev_hidden = self._seed_inputs(spec_info)
        forward_batch.input_ids = seed_input_ids
        forward_batch.spec_info.hidden_states = seed_prev_hidden
        self._set_positions(forward_batch)
        seed_output = self._run_step(forward_batch)
        maybe_detect_nan(seed_output.next_token_logits, "frozen_kv_mtp_draft: seed")
        seed_logits = seed_output.next_token_logits[:: self.topk]
        hidden_states = seed_output.hidden_states[:: self.topk]
        topk_p, topk_index = fast_topk(torch.softmax(seed_logits, dim=-1), self.topk, dim=-1)

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
            forward_batch.spec_info.hidden_states = hidden_states
            self._set_positions(forward_batch)
            logits_output = self._run_step(forward_batch)
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            hidden_states = logits_output.hidden_states
        return organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )

    def draft_forward_guarded(self, forward_batch: ForwardBatch):
        # idiom: speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward (refused under MLP sync)
        # expect: clean
        spec_info = forward_batch.spec_info
        assert isinstance(spec_info, FrozenKVMTPDraftInput)
        if require_mlp_sync() and not forward_batch.forward_mode.is_idle():
            # The target-view plan is a view-context plan: ModelRunner cannot
            # redo it after DP padding, so the eager frozen draft is refused.
            raise NotImplementedError(
                "eager Frozen-KV MTP draft with DP attention / MLP sync; "
                "capture the frozen draft cuda graph for this batch size"
            )
        score_list, token_list, parents_list = [], [], []
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)

        seed_input_ids, seed_prev_hidden = self._seed_inputs(spec_info)
        forward_batch.input_ids = seed_input_ids
        forward_batch.spec_info.hidden_states = seed_prev_hidden
        self._set_positions(forward_batch)
        seed_output = self._run_step(forward_batch)
        seed_logits = seed_output.next_token_logits[:: self.topk]
        hidden_states = seed_output.hidden_states[:: self.topk]
        topk_p, topk_index = fast_topk(torch.softmax(seed_logits, dim=-1), self.topk, dim=-1)

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
            forward_batch.spec_info.hidden_states = hidden_states
            self._set_positions(forward_batch)
            logits_output = self._run_step(forward_batch)
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            hidden_states = logits_output.hidden_states
        return organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )
