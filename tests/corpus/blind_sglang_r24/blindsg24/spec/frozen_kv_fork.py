"""Frozen-KV MTP patches: the seed forward of the frozen draft, planned inside
the target-KV view (the plan must see the target pool, so the runner's own
post-pad re-plan is *not* equivalent and must stay off)."""

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.utils.common import fast_topk


class ForkFrozenKVMTPDraftWorker(FrozenKVMTPDraftWorker):
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

    def _seed_topk(self, logits_output):
        logits = logits_output.next_token_logits
        if self.topk > 1:
            logits = logits[:: self.topk]
        return fast_topk(torch.softmax(logits, dim=-1), self.topk, dim=-1)

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker._init_frozen_kv_metadata + draft_forward (seed iter)
    # expect: SG106
    def seed_forward(self, forward_batch: ForwardBatch):
        self._seed_inputs(forward_batch)
        if not forward_batch.forward_mode.is_idle():
            forward_batch.seq_lens_sum = int(forward_batch.seq_lens_cpu.sum().item())
            with self._frozen_kv_target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_model_runner.forward(forward_batch).logits_output
        return self._seed_topk(seed_output)

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward (needs_forward_metadata_init guard before the seed forward)
    # expect: SG106
    def seed_forward_guarded(self, forward_batch: ForwardBatch):
        self._seed_inputs(forward_batch)
        # One init covers the seed and the recurrent iters.
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_model_runner.forward(forward_batch).logits_output
        return self._seed_topk(seed_output)

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker._init_frozen_kv_metadata; ModelRunner._forward_raw order (pad, plan, eager)
    # expect: clean
    def seed_forward_prepadded(self, forward_batch: ForwardBatch):
        self._seed_inputs(forward_batch)
        runner = self.draft_model_runner
        synced = forward_batch.global_num_tokens_cpu is not None
        if synced:
            # DP padding before the view-context plan.
            forward_batch.prepare_mlp_sync_batch(runner)
        if not forward_batch.forward_mode.is_idle():
            with self._frozen_kv_target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = runner.eager_runner.execute(forward_batch)
        if synced:
            forward_batch.post_forward_mlp_sync_batch(seed_output)
        return self._seed_topk(seed_output)

    # idiom: sglang/srt/model_executor/forward_batch_info.py ForwardBatch.mark_forward_metadata_ready (plan record taken after padding)
    # expect: SG106
    def seed_forward_marked_late(self, forward_batch: ForwardBatch):
        self._seed_inputs(forward_batch)
        runner = self.draft_model_runner
        synced = forward_batch.global_num_tokens_cpu is not None
        if not forward_batch.forward_mode.is_idle():
            with self._frozen_kv_target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
        if synced:
            forward_batch.prepare_mlp_sync_batch(runner)
        # Record the shapes the forward will actually run with.
        forward_batch.mark_forward_metadata_ready()
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = runner.eager_runner.execute(forward_batch)
        if synced:
            forward_batch.post_forward_mlp_sync_batch(seed_output)
        return self._seed_topk(seed_output)
