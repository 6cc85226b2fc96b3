"""Frozen-KV MTP: seed-only draft (num_steps == 1 deployments).

With one step the recurrent loop never runs; we only need the assistant's
seed forward on (bonus_token, target_hidden) to produce the next proposal.
"""

from __future__ import annotations

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.utils.common import fast_topk, require_mlp_sync


class SeedOnlyFrozenKVDraftWorker(FrozenKVMTPDraftWorker):
    def _seed_inputs(self, forward_batch: ForwardBatch) -> None:
        spec_info = forward_batch.spec_info
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

    def _seed_forward(self, forward_batch: ForwardBatch):
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            return self.draft_model_runner.forward(forward_batch).logits_output

    # expect: SG106
    def seed_only_draft(self, forward_batch: ForwardBatch):
        if forward_batch.needs_forward_metadata_init():
            # Plans through the frozen target view and marks the batch.
            self._init_frozen_kv_metadata(forward_batch)
        self._seed_inputs(forward_batch)
        logits_output = self._seed_forward(forward_batch)
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        return fast_topk(probs, self.topk, dim=-1)

    # expect: clean
    def seed_only_draft_no_mlp_sync(self, forward_batch: ForwardBatch):
        if require_mlp_sync():
            # _init_frozen_kv_metadata plans under the target view, which the
            # runner cannot redo after its MLP-sync padding; refuse rather
            # than run on a plan for the unpadded batch.
            raise NotImplementedError(
                "seed-only frozen-KV draft is not supported with DP attention "
                "or gathered buffers; use the recurrent draft path"
            )
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        self._seed_inputs(forward_batch)
        logits_output = self._seed_forward(forward_batch)
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        return fast_topk(probs, self.topk, dim=-1)
