"""Frozen-KV MTP drafter: the MTP head reads the target's KV cache (no draft
KV of its own), so one metadata plan over the target view covers the seed
step and every recurrent step."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, List, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.frozen_kv_mtp_utils import (
    expand_for_topk_draft,
    frozen_kv_target_view,
    set_frozen_kv_positions,
    target_kv_pool_view,
)
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.common import fast_topk, is_npu

from blindsg32.common.settings import MTPDraftSettings
from blindsg32.mtp.contexts import draft_backend_scope, planned_forward_scope
from blindsg32.mtp.plan_utils import refresh_seq_lens_sum

_is_npu = is_npu()

logger = logging.getLogger(__name__)


class FrozenKVMTPDrafter:
    def __init__(
        self,
        settings: MTPDraftSettings,
        draft_model_runner: Any,
        draft_attn_backend: Any,
        kv_context: Any,
    ):
        self.settings = settings
        self.topk = settings.topk
        self.num_steps = settings.num_steps
        self.num_draft_tokens = settings.num_draft_tokens
        self.draft_model_runner = draft_model_runner
        self.draft_attn_backend = draft_attn_backend
        self.kv_context = kv_context

    @classmethod
    def from_worker(cls, worker: Any) -> "FrozenKVMTPDrafter":
        return cls(
            MTPDraftSettings.from_spec_context(),
            worker.draft_model_runner,
            worker.draft_attn_backend,
            worker.kv_context,
        )

    @property
    def preplan_in_view(self) -> bool:
        # NPU block tables are rebuilt inside forward_extend; everywhere else
        # the view plan is authoritative.
        return not _is_npu

    def _target_view(self, forward_batch: ForwardBatch):
        return frozen_kv_target_view(
            forward_batch, self.kv_context, self.draft_attn_backend
        )

    def _pool_view(self, forward_batch: ForwardBatch):
        return target_kv_pool_view(
            forward_batch, self.kv_context, self.draft_attn_backend
        )

    def _init_frozen_metadata(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        refresh_seq_lens_sum(forward_batch)
        with self._target_view(forward_batch):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    def _topk(self, logits: torch.Tensor):
        return fast_topk(torch.softmax(logits, dim=-1), self.topk, dim=-1)

    # idiom: speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward; one view plan + mark covers seed and recurrent steps, each run through draft_model_runner.forward
    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_metadata(forward_batch)

        seed_ids = spec_info.bonus_tokens
        seed_hidden = spec_info.hidden_states
        if self.topk > 1:
            seed_ids = seed_ids.repeat_interleave(self.topk, dim=0)
            seed_hidden = seed_hidden.repeat_interleave(self.topk, dim=0)
        forward_batch.input_ids = seed_ids
        spec_info.hidden_states = seed_hidden
        set_frozen_kv_positions(forward_batch, self.topk)
        with self._pool_view(forward_batch), draft_backend_scope(
            self.draft_attn_backend, forward_batch
        ):
            seed = self.draft_model_runner.forward(forward_batch).logits_output
        logits = seed.next_token_logits[:: self.topk]
        hidden_states = seed.hidden_states[:: self.topk]
        topk_p, topk_index = self._topk(logits)

        score_list: List[torch.Tensor] = []
        token_list: List[torch.Tensor] = []
        parents_list: List[torch.Tensor] = []
        scores = None
        for i in range(self.num_steps):
            input_ids, hidden_states, scores, tree_info = select_top_k_tokens(
                i, topk_p, topk_index, hidden_states, scores, self.topk
            )
            score_list.append(tree_info[0])
            token_list.append(tree_info[1])
            parents_list.append(tree_info[2])
            if i == self.num_steps - 1:
                break
            forward_batch.input_ids = input_ids
            spec_info.hidden_states = hidden_states
            set_frozen_kv_positions(forward_batch, self.topk)
            with self._pool_view(forward_batch), draft_backend_scope(
                self.draft_attn_backend, forward_batch
            ):
                out = self.draft_model_runner.forward(forward_batch).logits_output
            topk_p, topk_index = self._topk(out.next_token_logits)
            hidden_states = out.hidden_states
        return organize_draft_results(
            score_list, token_list, parents_list, self.num_draft_tokens
        )

    # idiom: speculative/frozen_kv_mtp_worker_v2.py draft_forward seed iter; returns early to an unplanned forward when DP attention is on, pre-plans in the target view otherwise
    # expect: clean
    def seed_forward(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        forward_batch.input_ids = spec_info.bonus_tokens
        set_frozen_kv_positions(forward_batch, self.topk)
        if get_parallel().attn_dp_enabled:
            # DP padding happens inside the runner; let it plan the padded batch.
            with self._pool_view(forward_batch), draft_backend_scope(
                self.draft_attn_backend, forward_batch
            ):
                return self.draft_model_runner.forward(forward_batch).logits_output
        self._init_frozen_metadata(forward_batch)
        with self._pool_view(forward_batch), draft_backend_scope(
            self.draft_attn_backend, forward_batch
        ):
            return self.draft_model_runner.forward(forward_batch).logits_output

    # idiom: speculative/frozen_kv_mtp_worker_v2.py draft_forward recurrent iter; plan+mark done by the planned_forward_scope context manager wrapped around the forward
    # expect: SG106
    def _recurrent_step(self, forward_batch: ForwardBatch, input_ids: torch.Tensor, hidden: torch.Tensor):
        forward_batch.input_ids = input_ids
        forward_batch.spec_info.hidden_states = hidden
        set_frozen_kv_positions(forward_batch, self.topk)
        refresh_seq_lens_sum(forward_batch)
        with self._pool_view(forward_batch), planned_forward_scope(
            self.draft_attn_backend, forward_batch
        ):
            out = self.draft_model_runner.forward(forward_batch).logits_output
        return self._topk(out.next_token_logits), out.hidden_states

    # idiom: speculative/frozen_kv_mtp_worker_v2.py draft + expand_for_topk_draft; topk-expanded batch pre-planned when the preplan_in_view property allows (all non-NPU), marked, forwarded
    # expect: SG106
    def _expanded_topk_step(self, forward_batch: ForwardBatch):
        expand_for_topk_draft(forward_batch, self.topk)
        set_frozen_kv_positions(forward_batch, self.topk)
        if self.preplan_in_view and not forward_batch.forward_mode.is_idle():
            refresh_seq_lens_sum(forward_batch)
            with self._target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        with self._pool_view(forward_batch), draft_backend_scope(
            self.draft_attn_backend, forward_batch
        ):
            return self.draft_model_runner.forward(forward_batch).logits_output
