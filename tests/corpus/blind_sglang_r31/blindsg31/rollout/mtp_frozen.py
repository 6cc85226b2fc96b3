"""Rollout driver for the frozen-KV MTP draft worker (no draft KV writes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.runtime_context import get_parallel

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker


class FrozenMTPRollout:
    def __init__(self, worker: "FrozenKVMTPDraftWorker"):
        self.worker = worker
        self.runner = worker.draft_model_runner
        self.backend = worker.draft_attn_backend
        self.topk = worker.topk

    def _seed_batch(self, batch: "ScheduleBatch") -> ForwardBatch:
        spec_info = batch.spec_info
        spec_info.capture_hidden_mode = CaptureHiddenMode.LAST
        spec_info.num_tokens_per_req = self.topk
        spec_info.num_tokens_for_logprob_per_req = self.topk
        spec_info.positions = self.worker._position_for_batch(batch)
        batch.seq_lens_sum = torch.sum(batch.seq_lens).item()
        forward_batch = ForwardBatch.init_new(
            batch, self.runner, return_hidden_states_before_norm=False
        )
        self.worker._set_positions(forward_batch)
        self.worker._expand_for_topk_draft(forward_batch)
        forward_batch.out_cache_loc = None
        forward_batch.input_ids = spec_info.bonus_tokens
        return forward_batch

    def _seed_forward(self, forward_batch: ForwardBatch):
        with (
            self.worker._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.backend),
                forward_batch=forward_batch,
            ),
        ):
            return self.runner.forward(forward_batch).logits_output

    # idiom: speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward; view-context plan + mark, then the seed draft forward
    # expect: SG106
    def seed_and_draft(self, batch: "ScheduleBatch"):
        forward_batch = self._seed_batch(batch)
        if not forward_batch.forward_mode.is_idle():
            with self.worker._frozen_kv_target_view(forward_batch):
                self.backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self._seed_forward(forward_batch)

    # idiom: speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward; asserts a single attention-DP rank before the view-context pre-plan
    # expect: clean
    def seed_and_draft_single_dp(self, batch: "ScheduleBatch"):
        if get_parallel().attn_dp_size > 1:
            raise NotImplementedError(
                "frozen-KV MTP rollout pre-plans in the target view; the DP "
                "padding in ModelRunner.forward would run it with stale metadata"
            )
        forward_batch = self._seed_batch(batch)
        if not forward_batch.forward_mode.is_idle():
            with self.worker._frozen_kv_target_view(forward_batch):
                self.backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self._seed_forward(forward_batch)

    # idiom: speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker._init_frozen_kv_metadata; calls the worker's plan-and-mark helper, then the seed forward
    # expect: SG106
    def seed_via_worker(self, batch: "ScheduleBatch"):
        forward_batch = self._seed_batch(batch)
        if forward_batch.needs_forward_metadata_init():
            self.worker._init_frozen_kv_metadata(forward_batch)
        return self._seed_forward(forward_batch)
