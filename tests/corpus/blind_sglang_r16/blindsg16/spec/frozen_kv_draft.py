# Copyright 2023-2026 SGLang Team
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# ==============================================================================
"""Frozen-KV MTP draft forwards (assistant head reading the target KV).

The seed and recurrent iterations of a frozen-KV draft share one rope
position, so the metadata planned against the target KV view covers every
iteration of a draft step.
"""

from __future__ import annotations

import logging
from typing import List

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


class PaddedFrozenKVDraftWorker(FrozenKVMTPDraftWorker):
    def _seed_inputs(self, forward_batch: ForwardBatch) -> None:
        spec_info: FrozenKVMTPDraftInput = forward_batch.spec_info
        if self.topk > 1:
            forward_batch.input_ids = spec_info.bonus_tokens.repeat_interleave(
                self.topk, dim=0
            )
            spec_info.hidden_states = spec_info.hidden_states.repeat_interleave(
                self.topk, dim=0
            )
        else:
            forward_batch.input_ids = spec_info.bonus_tokens
        self._set_positions(forward_batch)

    def _recurrent_steps(self, forward_batch: ForwardBatch, seed_output):
        seed_logits = seed_output.next_token_logits[:: self.topk]
        hidden_states = seed_output.hidden_states[:: self.topk]
        topk_p, topk_index = fast_topk(
            torch.softmax(seed_logits, dim=-1), self.topk, dim=-1
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
            forward_batch.spec_info.hidden_states = hidden_states
            self._set_positions(forward_batch)
            with (
                self._target_kv_pool_view(forward_batch),
                forward_context(
                    ForwardContext(attn_backend=self.draft_attn_backend),
                    forward_batch=forward_batch,
                ),
            ):
                logits_output = self.draft_model_runner.forward(
                    forward_batch
                ).logits_output
            topk_p, topk_index = fast_topk(
                torch.softmax(logits_output.next_token_logits, dim=-1),
                self.topk,
                dim=-1,
            )
            hidden_states = logits_output.hidden_states
        return organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )

    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        assert isinstance(spec_info, FrozenKVMTPDraftInput)

        if not forward_batch.forward_mode.is_idle():
            with self._frozen_kv_target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        self._seed_inputs(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_model_runner.forward(forward_batch).logits_output
        maybe_detect_nan(seed_output.next_token_logits, "frozen_kv_mtp_draft: seed")
        return self._recurrent_steps(forward_batch, seed_output)

    # expect: SG106
    def draft_forward_flagged(self, forward_batch: ForwardBatch):
        if forward_batch.seq_lens_cpu is not None:
            forward_batch.seq_lens_sum = forward_batch.seq_lens_cpu.sum().item()
        with self._frozen_kv_target_view(forward_batch):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.forward_metadata_ready = True

        self._seed_inputs(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_model_runner.forward(forward_batch).logits_output
        return self._recurrent_steps(forward_batch, seed_output)

    # expect: clean
    def draft_forward_seed_only(self, forward_batch: ForwardBatch):
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self.draft_model_runner)
        if not forward_batch.forward_mode.is_idle():
            with self._frozen_kv_target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        self._seed_inputs(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_model_runner.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(seed_output)
        seed_logits = seed_output.next_token_logits[:: self.topk]
        probs = torch.softmax(seed_logits, dim=-1)
        return fast_topk(probs, self.topk, dim=-1), seed_output.hidden_states

    # expect: clean
    def draft_forward_seed_eager(self, forward_batch: ForwardBatch):
        idle = forward_batch.forward_mode.is_idle()
        if not idle:
            with self._frozen_kv_target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self.draft_model_runner)
            if not idle:
                with self._frozen_kv_target_view(forward_batch):
                    self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()

        self._seed_inputs(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_model_runner.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(seed_output)
        return seed_output

    # expect: SG106
    def draft_forward_expand_first(self, forward_batch: ForwardBatch):
        if self.topk > 1:
            self._expand_for_topk_draft(forward_batch)
        if not forward_batch.forward_mode.is_idle():
            with self._frozen_kv_target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        self._seed_inputs(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_model_runner.forward(forward_batch).logits_output
        return self._recurrent_steps(forward_batch, seed_output)
