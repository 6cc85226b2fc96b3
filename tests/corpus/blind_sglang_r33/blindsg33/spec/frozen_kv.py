"""Frozen-KV MTP draft workers used for the lab's assistant-head experiments."""

from __future__ import annotations

import logging

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.common import fast_topk

logger = logging.getLogger(__name__)


class RefreshingFrozenKVDraftWorker(FrozenKVMTPDraftWorker):
    """Recomputes seq_lens_sum on the host mirror when available."""

    # idiom: speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker._init_frozen_kv_metadata — override: seq_lens_sum from the CPU mirror, plan inside _frozen_kv_target_view, then mark
    # expect: SG106
    def _init_frozen_kv_metadata(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        seq_lens_cpu = forward_batch.seq_lens_cpu
        forward_batch.seq_lens_sum = int(
            seq_lens_cpu.sum().item()
            if seq_lens_cpu is not None
            else forward_batch.seq_lens.sum().item()
        )
        with self._frozen_kv_target_view(forward_batch):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()


class AssistantFrozenKVDraftWorker(FrozenKVMTPDraftWorker):
    # idiom: speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker._init_frozen_kv_metadata — override that raises NotImplementedError when attn_dp_enabled or the batch has DP token counts, then plans inside the target view and marks
    # expect: clean
    def _init_frozen_kv_metadata(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        if (
            get_parallel().attn_dp_enabled
            or forward_batch.global_num_tokens_cpu is not None
        ):
            raise NotImplementedError(
                "Frozen-KV MTP drafting is not wired for --enable-dp-attention"
            )
        forward_batch.seq_lens_sum = torch.sum(forward_batch.seq_lens).item()
        with self._frozen_kv_target_view(forward_batch):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()


class SeedFirstFrozenKVDraftWorker(FrozenKVMTPDraftWorker):
    """Always re-inits the frozen view before the seed forward (the lab swaps
    the target KV view between seeds when the trainer pushes new weights)."""

    # idiom: speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward — override that calls the inherited _init_frozen_kv_metadata unconditionally, then runs the seed and recurrent forwards
    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        self._init_frozen_kv_metadata(forward_batch)

        if self.topk > 1:
            seed_ids = spec_info.bonus_tokens.repeat_interleave(self.topk, dim=0)
            seed_hidden = spec_info.hidden_states.repeat_interleave(self.topk, dim=0)
        else:
            seed_ids, seed_hidden = spec_info.bonus_tokens, spec_info.hidden_states
        forward_batch.input_ids = seed_ids
        spec_info.hidden_states = seed_hidden
        self._set_positions(forward_batch)

        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_out = self.draft_model_runner.forward(forward_batch).logits_output

        logits = seed_out.next_token_logits[:: self.topk]
        hidden_states = seed_out.hidden_states[:: self.topk]
        topk_p, topk_index = fast_topk(torch.softmax(logits, dim=-1), self.topk, dim=-1)

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
            spec_info.hidden_states = hidden_states
            self._set_positions(forward_batch)
            with (
                self._target_kv_pool_view(forward_batch),
                forward_context(
                    ForwardContext(attn_backend=self.draft_attn_backend),
                    forward_batch=forward_batch,
                ),
            ):
                out = self.draft_model_runner.forward(forward_batch).logits_output
            topk_p, topk_index = fast_topk(
                torch.softmax(out.next_token_logits, dim=-1), self.topk, dim=-1
            )
            hidden_states = out.hidden_states

        return organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )
