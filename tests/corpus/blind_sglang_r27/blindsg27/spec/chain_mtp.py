"""Chained MTP drafters: one runner per MTP layer, and a frozen-KV seed drafter."""

from __future__ import annotations

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import MultiLayerEagleDraftWorker
from sglang.srt.utils.common import fast_topk


class ChainMTPDraftWorker(MultiLayerEagleDraftWorker):
    """Runs the MTP layers of the target as a chain, one runner per layer."""

    def _bind_step_pools(self, forward_batch: ForwardBatch, step: int) -> None:
        runner = self.draft_runner_list[step]
        forward_batch.req_to_token_pool = runner.req_to_token_pool
        forward_batch.token_to_kv_pool = runner.token_to_kv_pool

    # idiom: multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker draft extend loop (each step plans its runner's backend, then marks)
    # expect: SG106
    def _run_draft_extend_steps(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            runner = self.draft_runner_list[step]
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                # Already planned for this runner; skip the runner's own plan.
                forward_batch.mark_forward_metadata_ready()
            out = runner.forward(forward_batch)
            logits = out.logits_output.next_token_logits[select_index]
            topk_p, topk_index = fast_topk(torch.softmax(logits, dim=-1), self.topk, dim=-1)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return torch.cat(topk_p_list, dim=1), torch.cat(topk_index_list, dim=1)

    # idiom: multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker draft extend loop ("left unmarked on every platform")
    # expect: clean
    def _run_draft_extend_steps_unmarked(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            runner = self.draft_runner_list[step]
            if not forward_batch.forward_mode.is_idle():
                # Pre-pad plan; the forward plans again after the DP padding
                # because the batch is left unmarked.
                runner.attn_backend.init_forward_metadata(forward_batch)
            out = runner.forward(forward_batch)
            logits = out.logits_output.next_token_logits[select_index]
            topk_p, topk_index = fast_topk(torch.softmax(logits, dim=-1), self.topk, dim=-1)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return torch.cat(topk_p_list, dim=1), torch.cat(topk_index_list, dim=1)


class FrozenViewMTPDraftWorker(FrozenKVMTPDraftWorker):
    """Frozen-KV MTP drafter whose seed iteration reads the target KV."""

    def _seed_inputs(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        if self.topk > 1:
            forward_batch.input_ids = spec_info.bonus_tokens.repeat_interleave(self.topk, dim=0)
            spec_info.hidden_states = spec_info.hidden_states.repeat_interleave(self.topk, dim=0)
        else:
            forward_batch.input_ids = spec_info.bonus_tokens
        self._set_positions(forward_batch)

    def _run_seed(self, forward_batch: ForwardBatch):
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            return self.draft_model_runner.forward(forward_batch).logits_output

    # idiom: frozen_kv_mtp_worker_v2.FrozenKVMTPDraftWorker.draft_forward + _init_frozen_kv_metadata (plan under the target view, mark, seed forward)
    # expect: SG106
    def draft_forward_seed(self, forward_batch: ForwardBatch):
        if forward_batch.needs_forward_metadata_init() and not forward_batch.forward_mode.is_idle():
            if forward_batch.seq_lens_cpu is not None:
                forward_batch.seq_lens_sum = forward_batch.seq_lens_cpu.sum().item()
            else:
                forward_batch.seq_lens_sum = torch.sum(forward_batch.seq_lens).item()
            with self._frozen_kv_target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        self._seed_inputs(forward_batch)
        return self._run_seed(forward_batch)

    # idiom: frozen_kv_mtp_worker_v2.FrozenKVMTPDraftWorker._init_frozen_kv_metadata (view plans cannot re-plan: refuse an MLP-sync batch)
    # expect: clean
    def draft_forward_seed_guarded(self, forward_batch: ForwardBatch):
        if forward_batch.global_num_tokens_cpu is not None:
            raise NotImplementedError(
                "frozen-kv seed draft: the target-view plan cannot be redone after "
                "DP-attention padding; use the draft cuda graph"
            )
        if not forward_batch.forward_mode.is_idle():
            with self._frozen_kv_target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        self._seed_inputs(forward_batch)
        return self._run_seed(forward_batch)

    # idiom: frozen_kv_mtp_worker_v2.FrozenKVMTPDraftWorker._init_frozen_kv_metadata (plan in try, mark in finally)
    # expect: SG106
    def _seed_forward_with_restore(self, forward_batch: ForwardBatch):
        saved_sum = forward_batch.seq_lens_sum
        try:
            forward_batch.seq_lens_sum = int(forward_batch.seq_lens.sum().item())
            with self._frozen_kv_target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
        finally:
            forward_batch.seq_lens_sum = saved_sum
            forward_batch.mark_forward_metadata_ready()
        self._seed_inputs(forward_batch)
        return self._run_seed(forward_batch)
