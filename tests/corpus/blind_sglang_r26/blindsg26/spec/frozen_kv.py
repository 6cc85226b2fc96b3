"""Fork Frozen-KV MTP draft worker: seed-iteration forwards under DP attention."""

from __future__ import annotations

import logging

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.utils.common import fast_topk

from blindsg26.common.planning import pad_for_dp, run_padded_eager

logger = logging.getLogger(__name__)


class ForkFrozenKVMTPDraftWorker(FrozenKVMTPDraftWorker):
    """Adds a seed-only draft path (speculative_num_steps == 1 deployments)."""

    def _seed_inputs(self, forward_batch: ForwardBatch) -> None:
        spec_info = forward_batch.spec_info
        bonus_tokens = spec_info.bonus_tokens
        target_hidden = spec_info.hidden_states
        if self.topk > 1:
            forward_batch.input_ids = bonus_tokens.repeat_interleave(self.topk, dim=0)
            spec_info.hidden_states = target_hidden.repeat_interleave(self.topk, dim=0)
        else:
            forward_batch.input_ids = bonus_tokens
            spec_info.hidden_states = target_hidden
        self._set_positions(forward_batch)

    def _seed_topk(self, logits_output):
        next_logits = logits_output.next_token_logits
        if self.topk > 1:
            next_logits = next_logits[:: self.topk]
        probs = torch.softmax(next_logits, dim=-1)
        return fast_topk(probs, self.topk, dim=-1)

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward (seed iter: _init_frozen_kv_metadata plans + marks, then draft_model_runner.forward)
    # expect: SG106
    @torch.inference_mode()
    def _seed_forward(self, forward_batch: ForwardBatch):
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        self._seed_inputs(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            logits_output = self.draft_model_runner.forward(forward_batch).logits_output
        return self._seed_topk(logits_output)

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward, DP padding applied before _init_frozen_kv_metadata (ModelRunner._prepare_eager_forward_batch + eager runner)
    # expect: clean
    @torch.inference_mode()
    def _seed_forward_dp_padded(self, forward_batch: ForwardBatch):
        self._seed_inputs(forward_batch)
        # Pad first, so the frozen-KV plan (a view-context plan the runner
        # cannot redo) describes the padded batch the kernels will see.
        pad_for_dp(self.draft_model_runner, forward_batch)
        self._init_frozen_kv_metadata(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            logits_output = run_padded_eager(self.draft_model_runner, forward_batch)
        return self._seed_topk(logits_output)
