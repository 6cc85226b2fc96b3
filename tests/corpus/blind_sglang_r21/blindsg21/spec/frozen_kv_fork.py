"""Frozen-KV MTP draft workers.

The frozen-KV draft attends over the *target's* KV pool through a view
context (``_frozen_kv_target_view``), so its metadata is planned under that
view and cannot be rebuilt by the runner's own forward-path planning.
"""

from __future__ import annotations

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.utils.common import require_mlp_sync


class EagerFrozenKVDraftWorker(FrozenKVMTPDraftWorker):
    # expect: SG106
    def _run_seed_step(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        # Plans under the target-KV view and marks the batch.
        self._init_frozen_kv_metadata(forward_batch)
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
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            return self.draft_model_runner.forward(forward_batch).logits_output


class DpGuardedFrozenKVDraftWorker(FrozenKVMTPDraftWorker):
    # expect: clean
    def _run_seed_step(self, forward_batch: ForwardBatch):
        if require_mlp_sync() and not forward_batch.forward_mode.is_idle():
            # The view-context plan cannot be redone after the runner's DP
            # padding; eager frozen-KV drafting is single-DP only.
            raise NotImplementedError(
                "frozen-KV MTP eager draft does not support DP attention; "
                "enable the draft CUDA graph"
            )
        spec_info = forward_batch.spec_info
        self._init_frozen_kv_metadata(forward_batch)
        seed_ids, seed_hidden = spec_info.bonus_tokens, spec_info.hidden_states
        if self.topk > 1:
            seed_ids = seed_ids.repeat_interleave(self.topk, dim=0)
            seed_hidden = seed_hidden.repeat_interleave(self.topk, dim=0)
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
            return self.draft_model_runner.forward(forward_batch).logits_output
