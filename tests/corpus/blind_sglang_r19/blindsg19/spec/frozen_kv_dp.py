"""Seed-only Frozen-KV MTP draft variants (one assistant forward per step)."""

from __future__ import annotations

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.frozen_kv_mtp_info import FrozenKVMTPDraftInput
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.utils.common import fast_topk


class FrozenKVSeedWorker(FrozenKVMTPDraftWorker):
    """Frozen-KV MTP draft that only runs the seed iteration (num_steps == 1)
    and returns the seed top-k as the whole draft."""

    def _seed_inputs(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        bonus_tokens = spec_info.bonus_tokens
        target_hidden = spec_info.hidden_states
        if self.topk > 1:
            bonus_tokens = bonus_tokens.repeat_interleave(self.topk, dim=0)
            target_hidden = target_hidden.repeat_interleave(self.topk, dim=0)
        return bonus_tokens, target_hidden

    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        assert isinstance(spec_info, FrozenKVMTPDraftInput)

        if forward_batch.needs_forward_metadata_init():
            # Plans under the target-KV view and marks the batch.
            self._init_frozen_kv_metadata(forward_batch)

        seed_input_ids, seed_prev_hidden = self._seed_inputs(forward_batch)
        forward_batch.input_ids = seed_input_ids
        forward_batch.spec_info.hidden_states = seed_prev_hidden
        self._set_positions(forward_batch)

        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_model_runner.forward(forward_batch).logits_output

        logits = seed_output.next_token_logits
        if self.topk > 1:
            logits = logits[:: self.topk]
        probs = torch.softmax(logits, dim=-1)
        return fast_topk(probs, self.topk, dim=-1)

    # expect: clean
    def _checked_draft_forward(self, forward_batch: ForwardBatch):
        """Same seed-only draft, for deployments that may turn on DP attention.

        The frozen-KV plan is made under the target-KV view and cannot be
        redone by the runner after it pads the batch, so the eager seed path
        is refused outright when the batch will be DP-padded.
        """
        if forward_batch.global_num_tokens_cpu is not None or (
            get_parallel().attn_dp_enabled
        ):
            raise NotImplementedError(
                "frozen-KV MTP eager seed draft does not support DP attention; "
                "enable the draft cuda graph instead"
            )
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)

        seed_input_ids, seed_prev_hidden = self._seed_inputs(forward_batch)
        forward_batch.input_ids = seed_input_ids
        forward_batch.spec_info.hidden_states = seed_prev_hidden
        self._set_positions(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_model_runner.forward(forward_batch).logits_output
        probs = torch.softmax(seed_output.next_token_logits, dim=-1)
        return fast_topk(probs, self.topk, dim=-1)


class PrepaddedFrozenKVWorker(FrozenKVMTPDraftWorker):
    """Frozen-KV MTP draft that pads for DP attention before it plans."""

    # expect: clean
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        assert isinstance(spec_info, FrozenKVMTPDraftInput)
        raw_bs = forward_batch.batch_size

        if forward_batch.global_num_tokens_cpu is not None:
            # Pad first: the frozen-KV plan must describe the padded rows,
            # because the runner will not re-plan a view-context plan.
            forward_batch.prepare_mlp_sync_batch(self.draft_model_runner)
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)

        forward_batch.input_ids = forward_batch._pad_tensor_to_size(
            spec_info.bonus_tokens, forward_batch.batch_size
        )
        forward_batch.spec_info.hidden_states = forward_batch._pad_tensor_to_size(
            spec_info.hidden_states, forward_batch.batch_size
        )
        self._set_positions(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_model_runner.forward(forward_batch).logits_output
        probs = torch.softmax(seed_output.next_token_logits[:raw_bs], dim=-1)
        return fast_topk(probs, self.topk, dim=-1)
