"""Frozen-KV NextN drafting: the draft reads the target KV through a view, so
its plan is made under that view (FrozenKVMTPDraftWorker._init_frozen_kv_metadata)
and cannot be re-made by the plain forward path."""

from __future__ import annotations

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.speculative.spec_utils import fast_topk, select_top_k_tokens
from sglang.srt.utils.common import require_mlp_sync


class FrozenNextNDraftWorker(FrozenKVMTPDraftWorker):
    def _seed_and_loop(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        forward_batch.input_ids = spec_info.bonus_tokens
        self._set_positions(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed = self.draft_model_runner.forward(forward_batch).logits_output
        probs = torch.softmax(seed.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        hidden_states = seed.hidden_states
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
            probs = torch.softmax(out.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            hidden_states = out.hidden_states
        return organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward
    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        # Seed + recurrent iterations share one rope position: one plan (made
        # under the target-KV view, then marked) covers the loop.
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        return self._seed_and_loop(forward_batch)


class FrozenNextNDraftWorkerNoDP(FrozenNextNDraftWorker):
    def __init__(
        self,
        server_args: ServerArgs,
        gpu_id: int,
        nccl_port: int,
        target_worker,
    ):
        if server_args.enable_dp_attention or require_mlp_sync():
            raise ValueError(
                "Frozen-KV NextN plans under a target-KV view the forward cannot "
                "re-plan after DP padding; --enable-dp-attention is not supported."
            )
        super().__init__(server_args, gpu_id, nccl_port, target_worker)

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward
    # expect: clean
    def draft_forward(self, forward_batch: ForwardBatch):
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        return self._seed_and_loop(forward_batch)


class FrozenTreeNextNDraftWorker(FrozenNextNDraftWorker):
    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward
    # expect: clean
    def draft_forward(self, forward_batch: ForwardBatch):
        if forward_batch.global_num_tokens_cpu is not None:
            raise NotImplementedError(
                "frozen-KV tree draft: the view-scoped plan cannot follow DP "
                "(MLP-sync) padding; run the draft without DP attention"
            )
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        return self._seed_and_loop(forward_batch)
