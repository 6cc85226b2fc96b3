"""Frozen-KV MTP draft steps in the fork.

The assistant reads the target's committed KV only; its metadata is planned
against the frozen target geometry (``_frozen_kv_target_view``) and the forward
runs with the target pool swapped in (``_target_kv_pool_view``).
"""

from __future__ import annotations

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.utils.common import require_mlp_sync


class FrozenKVDraftFork(FrozenKVMTPDraftWorker):
    def _seed_inputs(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        bonus_tokens = spec_info.bonus_tokens
        target_hidden = spec_info.hidden_states
        if self.topk > 1:
            bonus_tokens = bonus_tokens.repeat_interleave(self.topk, dim=0)
            target_hidden = target_hidden.repeat_interleave(self.topk, dim=0)
        forward_batch.input_ids = bonus_tokens
        forward_batch.spec_info.hidden_states = target_hidden
        self._set_positions(forward_batch)

    def _draft_ctx(self, forward_batch: ForwardBatch):
        return forward_context(
            ForwardContext(attn_backend=self.draft_attn_backend),
            forward_batch=forward_batch,
        )

    # idiom: speculative/eagle_worker_v2.py (0.5.6) draft_runner.forward(forward_batch, skip_attn_backend_init=True)
    # expect: SG106
    def draft_step(self, forward_batch: ForwardBatch) -> torch.Tensor:
        self._seed_inputs(forward_batch)
        if not forward_batch.forward_mode.is_idle():
            with self._frozen_kv_target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
        with self._target_kv_pool_view(forward_batch), self._draft_ctx(forward_batch):
            out = self.draft_model_runner.forward(
                forward_batch, skip_attn_backend_init=True
            )
        return out.logits_output

    # idiom: speculative/eagle_worker_v2.py (0.5.6) skip_attn_backend_init + utils/common.py require_mlp_sync
    # expect: clean
    def draft_step_dp_aware(self, forward_batch: ForwardBatch) -> torch.Tensor:
        self._seed_inputs(forward_batch)
        # Under DP attention the forward pads the batch; only pre-plan (and
        # skip the forward's own plan) when no MLP sync happens at all.
        preplan = not require_mlp_sync() and not forward_batch.forward_mode.is_idle()
        if preplan:
            with self._frozen_kv_target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
        with self._target_kv_pool_view(forward_batch), self._draft_ctx(forward_batch):
            out = self.draft_model_runner.forward(
                forward_batch, skip_attn_backend_init=preplan
            )
        return out.logits_output

    # idiom: speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward (seed iter)
    # expect: SG106
    def seed_forward(self, forward_batch: ForwardBatch):
        # Seed and recurrent iters share one rope position, so one plan
        # covers the whole draft loop.
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        self._seed_inputs(forward_batch)
        with self._target_kv_pool_view(forward_batch), self._draft_ctx(forward_batch):
            seed_output = self.draft_model_runner.forward(forward_batch).logits_output
        if self.topk > 1:
            return seed_output.next_token_logits[:: self.topk]
        return seed_output.next_token_logits

    # idiom: speculative/frozen_kv_mtp_worker_v2.py draft_forward + model_runner.py ModelRunner._forward_raw (pad before plan)
    # expect: clean
    def seed_forward_padded(self, forward_batch: ForwardBatch):
        self._seed_inputs(forward_batch)
        runner = self.draft_model_runner
        # Pad exactly as the eager forward would, then plan the padded batch
        # against the frozen target geometry, then execute without re-padding.
        runner._prepare_eager_forward_batch(forward_batch)
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        with self._target_kv_pool_view(forward_batch), self._draft_ctx(forward_batch):
            seed_output = runner.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(seed_output)
        if self.topk > 1:
            return seed_output.next_token_logits[:: self.topk]
        return seed_output.next_token_logits
