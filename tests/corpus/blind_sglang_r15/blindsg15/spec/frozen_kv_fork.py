"""Frozen-KV MTP draft worker with a fork-side seed forward.

The draft attends over the target's committed KV (frozen) through a view
context; metadata is planned under that view and therefore cannot be redone by
the model runner's forward path.
"""

from __future__ import annotations

import logging

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker

from blindsg15.spec.planning import pad_for_dp, planned_batch, unplanned_on_exit

logger = logging.getLogger(__name__)


class ForkFrozenKVMTPDraftWorker(FrozenKVMTPDraftWorker):
    def _init_frozen_kv_metadata(self, forward_batch: ForwardBatch) -> None:
        # Same as upstream, plus a debug line; still planned under the
        # frozen target view and marked (view plans must not be re-planned).
        logger.debug(
            "frozen-kv plan: bs=%s mode=%s",
            forward_batch.batch_size,
            forward_batch.forward_mode,
        )
        super()._init_frozen_kv_metadata(forward_batch)

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

    # expect: SG106
    def draft_seed_forward(self, forward_batch: ForwardBatch):
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
            return self.draft_model_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_seed_forward_padded(self, forward_batch: ForwardBatch):
        # Pad for DP attention first, then plan under the frozen view on the
        # final shapes; run the eager runner directly (ModelRunner.forward
        # would pad a second time).
        pad_for_dp(forward_batch, self.draft_model_runner)
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
            ret = self.draft_model_runner.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # expect: SG106
    def draft_seed_forward_ctx(self, forward_batch: ForwardBatch):
        self._seed_inputs(forward_batch)
        with planned_batch(self.draft_attn_backend, forward_batch) as fb:
            with self._target_kv_pool_view(fb):
                out = self.draft_model_runner.forward(fb)
        return out.logits_output

    # expect: SG106
    def draft_seed_forward_unmark_on_exit(self, forward_batch: ForwardBatch):
        self._seed_inputs(forward_batch)
        with unplanned_on_exit(forward_batch):
            with self._frozen_kv_target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            with self._target_kv_pool_view(forward_batch):
                out = self.draft_model_runner.forward(forward_batch)
        # Mark dropped here so the recurrent iterations re-plan.
        return out.logits_output

    # expect: clean
    def draft_seed_forward_no_mlp_sync(self, forward_batch: ForwardBatch):
        if forward_batch.global_num_tokens_cpu is not None:
            raise NotImplementedError(
                "fork frozen-KV seed forward runs without DP attention only"
            )
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        self._seed_inputs(forward_batch)
        with self._target_kv_pool_view(forward_batch):
            return self.draft_model_runner.forward(forward_batch).logits_output
