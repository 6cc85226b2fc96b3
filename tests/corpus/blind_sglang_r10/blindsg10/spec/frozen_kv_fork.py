"""Frozen-KV MTP draft worker: the fork runs the seed iteration separately so
it can be profiled and retried on its own."""

from __future__ import annotations

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker


class ForkFrozenKVMTPDraftWorker(FrozenKVMTPDraftWorker):
    def _run_seed(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        forward_batch.input_ids = spec_info.bonus_tokens
        forward_batch.spec_info.hidden_states = spec_info.hidden_states
        self._set_positions(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            return self.draft_model_runner.forward(forward_batch).logits_output

    # expect: SG106
    def _seed_forward(self, forward_batch: ForwardBatch):
        """Seed iteration (topk == 1 deployments only)."""
        if self.topk != 1:
            raise ValueError("fork seed path expects topk == 1")
        # One init covers the seed: it plans inside the frozen target-KV view.
        self._init_frozen_kv_metadata(forward_batch)
        return self._run_seed(forward_batch)

    # expect: clean
    def _seed_forward_checked(self, forward_batch: ForwardBatch):
        if self.topk != 1:
            raise ValueError("fork seed path expects topk == 1")
        if forward_batch.global_num_tokens_cpu is not None:
            raise NotImplementedError(
                "frozen-KV MTP plans inside the target KV view and cannot re-plan "
                "after the MLP-sync pad; run the seed through the CUDA graph runner"
            )
        self._init_frozen_kv_metadata(forward_batch)
        return self._run_seed(forward_batch)
