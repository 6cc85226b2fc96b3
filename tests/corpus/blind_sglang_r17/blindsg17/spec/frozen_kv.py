"""Frozen-KV MTP draft with the seed iteration split out.

The assistant head reads the target model's KV cache through
``frozen_kv_target_view``; metadata is planned inside that view so the draft
backend sees the target pool's page table.
"""

from __future__ import annotations

import contextlib
import logging
from typing import List, Tuple

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.frozen_kv_mtp_info import FrozenKVMTPDraftInput
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.async_probe import maybe_detect_nan
from sglang.srt.utils.common import fast_topk

logger = logging.getLogger(__name__)


class SeededFrozenKVDraftWorker(FrozenKVMTPDraftWorker):
    def _seed_inputs(self, forward_batch: ForwardBatch) -> None:
        spec_info: FrozenKVMTPDraftInput = forward_batch.spec_info
        bonus_tokens = spec_info.bonus_tokens
        target_hidden = spec_info.hidden_states
        if self.topk > 1:
            bonus_tokens = bonus_tokens.repeat_interleave(self.topk, dim=0)
            target_hidden = target_hidden.repeat_interleave(self.topk, dim=0)
        forward_batch.input_ids = bonus_tokens
        forward_batch.spec_info.hidden_states = target_hidden
        self._set_positions(forward_batch)

    def _run_in_target_view(self, forward_batch: ForwardBatch):
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            return self.draft_model_runner.forward(forward_batch).logits_output

    def _seed_topk(self, seed_output) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.topk > 1:
            logits = seed_output.next_token_logits[:: self.topk]
            hidden = seed_output.hidden_states[:: self.topk]
        else:
            logits = seed_output.next_token_logits
            hidden = seed_output.hidden_states
        probs = torch.softmax(logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        return topk_p, topk_index, hidden

    # expect: SG106
    def seed_forward(self, forward_batch: ForwardBatch):
        assert isinstance(forward_batch.spec_info, FrozenKVMTPDraftInput)
        if not forward_batch.forward_mode.is_idle():
            if forward_batch.seq_lens_cpu is not None:
                forward_batch.seq_lens_sum = forward_batch.seq_lens_cpu.sum().item()
            with self._frozen_kv_target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        self._seed_inputs(forward_batch)
        seed_output = self._run_in_target_view(forward_batch)
        maybe_detect_nan(seed_output.next_token_logits, "frozen seed")
        return self._seed_topk(seed_output)

    # expect: clean
    def seed_forward_synced(self, forward_batch: ForwardBatch):
        assert isinstance(forward_batch.spec_info, FrozenKVMTPDraftInput)
        self._seed_inputs(forward_batch)
        if not forward_batch.forward_mode.is_idle():
            if forward_batch.global_num_tokens_cpu is not None:
                forward_batch.prepare_mlp_sync_batch(self.draft_model_runner)
            if forward_batch.seq_lens_cpu is not None:
                forward_batch.seq_lens_sum = forward_batch.seq_lens_cpu.sum().item()
            with self._frozen_kv_target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        seed_output = self._run_in_target_view(forward_batch)
        return self._seed_topk(seed_output)

    def _recurrent_steps(self, forward_batch, topk_p, topk_index, hidden_states):
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
            forward_batch.spec_info.hidden_states = hidden_states
            self._set_positions(forward_batch)
            logits_output = self._run_in_target_view(forward_batch)
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            hidden_states = logits_output.hidden_states
        return organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )

    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        assert isinstance(forward_batch.spec_info, FrozenKVMTPDraftInput)
        if not forward_batch.forward_mode.is_idle():
            with contextlib.ExitStack() as stack:
                stack.enter_context(self._frozen_kv_target_view(forward_batch))
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        self._seed_inputs(forward_batch)
        seed_output = self._run_in_target_view(forward_batch)
        topk_p, topk_index, hidden_states = self._seed_topk(seed_output)
        return self._recurrent_steps(forward_batch, topk_p, topk_index, hidden_states)

    # expect: clean
    def draft_forward_seeded(self, forward_batch: ForwardBatch):
        assert isinstance(forward_batch.spec_info, FrozenKVMTPDraftInput)
        self._seed_inputs(forward_batch)
        if not forward_batch.forward_mode.is_idle():
            with self._frozen_kv_target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            if forward_batch.global_num_tokens_cpu is not None:
                forward_batch.prepare_mlp_sync_batch(self.draft_model_runner)
                if (
                    forward_batch.batch_size
                    != forward_batch.forward_metadata_planned_bs
                    or forward_batch.input_ids.shape[0]
                    != forward_batch.forward_metadata_planned_num_tokens
                ):
                    with self._frozen_kv_target_view(forward_batch):
                        self.draft_attn_backend.init_forward_metadata(forward_batch)
                    forward_batch.mark_forward_metadata_ready()
        seed_output = self._run_in_target_view(forward_batch)
        topk_p, topk_index, hidden_states = self._seed_topk(seed_output)
        return self._recurrent_steps(forward_batch, topk_p, topk_index, hidden_states)
