"""Frozen-KV MTP draft worker of the fork.

Derived from ``sglang/srt/speculative/frozen_kv_mtp_worker_v2.py``
(``FrozenKVMTPDraftWorker``): the assistant model reads the target's KV cache
through a view context and never writes its own.
"""

from __future__ import annotations

import logging

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.frozen_kv_mtp_info import FrozenKVMTPDraftInput
from sglang.srt.speculative.frozen_kv_mtp_utils import (
    frozen_kv_target_view,
    set_frozen_kv_positions,
    target_kv_pool_view,
)
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.common import fast_topk

from blindsg39.draft.mixins import DpAttentionStateMixin

logger = logging.getLogger(__name__)


class ForkFrozenKVMTPDraftWorker(DpAttentionStateMixin):
    def __init__(self, server_args, target_worker, draft_model_runner, kv_context):
        self.server_args = server_args
        self.target_worker = target_worker
        self.draft_model_runner = draft_model_runner
        self.draft_attn_backend = draft_model_runner.attn_backend
        self.kv_context = kv_context
        self.topk = server_args.speculative_eagle_topk
        self.speculative_num_steps = server_args.speculative_num_steps
        self.speculative_num_draft_tokens = server_args.speculative_num_draft_tokens
        self.cuda_graph_runner = None

    def _frozen_kv_target_view(self, forward_batch: ForwardBatch):
        return frozen_kv_target_view(
            forward_batch, self.kv_context, self.draft_attn_backend
        )

    def _target_kv_pool_view(self, forward_batch: ForwardBatch):
        return target_kv_pool_view(
            forward_batch, self.kv_context, self.draft_attn_backend
        )

    def _set_positions(self, forward_batch: ForwardBatch) -> None:
        set_frozen_kv_positions(forward_batch, self.topk)

    def _init_frozen_kv_metadata(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        if forward_batch.seq_lens_cpu is not None:
            forward_batch.seq_lens_sum = forward_batch.seq_lens_cpu.sum().item()
        else:
            forward_batch.seq_lens_sum = torch.sum(forward_batch.seq_lens).item()
        with self._frozen_kv_target_view(forward_batch):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    def _seed(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        bonus_tokens = spec_info.bonus_tokens
        target_hidden = spec_info.hidden_states
        if self.topk > 1:
            forward_batch.input_ids = bonus_tokens.repeat_interleave(self.topk, dim=0)
            spec_info.hidden_states = target_hidden.repeat_interleave(
                self.topk, dim=0
            )
        else:
            forward_batch.input_ids = bonus_tokens
        self._set_positions(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            return self.draft_model_runner.forward(forward_batch).logits_output

    def _recurrent_steps(self, forward_batch, seed_output):
        score_list, token_list, parents_list = [], [], []
        seed_logits = seed_output.next_token_logits[:: self.topk]
        hidden_states = seed_output.hidden_states[:: self.topk]
        topk_p, topk_index = fast_topk(
            torch.softmax(seed_logits, dim=-1), self.topk, dim=-1
        )
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
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            hidden_states = logits_output.hidden_states
        return organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward
    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        assert isinstance(spec_info, FrozenKVMTPDraftInput)
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        seed_output = self._seed(forward_batch)
        return self._recurrent_steps(forward_batch, seed_output)

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward (seed iter)
    # expect: SG106
    def _run_seed_iter(self, forward_batch: ForwardBatch):
        self._init_frozen_kv_metadata(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_model_runner.forward(forward_batch).logits_output
        return seed_output

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward (seed iter)
    # expect: clean
    def _run_seed_iter_prepadded(self, forward_batch: ForwardBatch):
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self.draft_model_runner)
        self._init_frozen_kv_metadata(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_model_runner.forward(forward_batch).logits_output
        return seed_output

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward (DP guard)
    # expect: clean
    def draft_forward_checked(self, forward_batch: ForwardBatch):
        assert not get_parallel().attn_dp_enabled, (
            "Frozen-KV MTP pre-plans through the target KV view and cannot "
            "re-plan a DP-padded draft batch; disable DP attention."
        )
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        seed_output = self._seed(forward_batch)
        return self._recurrent_steps(forward_batch, seed_output)

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward (DP guard)
    # expect: SG106
    def draft_forward_warned(self, forward_batch: ForwardBatch):
        if get_parallel().attn_dp_enabled:
            logger.warning_once(
                "Frozen-KV MTP with DP attention: draft metadata is planned "
                "before MLP-sync padding."
            )
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        seed_output = self._seed(forward_batch)
        return self._recurrent_steps(forward_batch, seed_output)


class ForkFrozenKVMTPDraftWorkerNoDP(ForkFrozenKVMTPDraftWorker):
    """Frozen-KV MTP restricted to deployments without DP attention."""

    def __init__(self, server_args, target_worker, draft_model_runner, kv_context):
        if server_args.enable_dp_attention:
            raise ValueError(
                "Frozen-KV MTP does not support --enable-dp-attention: its draft "
                "metadata is planned through the target KV view before padding."
            )
        super().__init__(server_args, target_worker, draft_model_runner, kv_context)

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward
    # expect: clean
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        assert isinstance(spec_info, FrozenKVMTPDraftInput)
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        seed_output = self._seed(forward_batch)
        return self._recurrent_steps(forward_batch, seed_output)
