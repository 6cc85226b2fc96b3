"""Frozen-KV MTP draft: seed-only draft forward used by the fork's MTP head."""

from __future__ import annotations

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker


class ForkFrozenKVDraftWorker(FrozenKVMTPDraftWorker):
    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        # One init covers the seed forward (same rope position).
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)

        if self.topk > 1:
            seed_input_ids = spec_info.bonus_tokens.repeat_interleave(self.topk, dim=0)
            seed_hidden = spec_info.hidden_states.repeat_interleave(self.topk, dim=0)
        else:
            seed_input_ids = spec_info.bonus_tokens
            seed_hidden = spec_info.hidden_states
        forward_batch.input_ids = seed_input_ids
        forward_batch.spec_info.hidden_states = seed_hidden
        self._set_positions(forward_batch)

        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_model_runner.forward(forward_batch).logits_output
        return seed_output.next_token_logits, seed_output.hidden_states
