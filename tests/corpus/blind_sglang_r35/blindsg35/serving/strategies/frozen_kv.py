"""Frozen-KV MTP strategy: the assistant head reads the target's KV in place
and never writes its own."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.frozen_kv_mtp_utils import (
    frozen_kv_target_view,
    target_kv_pool_view,
)
from sglang.srt.utils import fast_topk, require_mlp_sync

from blindsg35.serving.config import SpecServingConfig, register_strategy
from blindsg35.serving.strategies.base import BaseDraftStrategy

if TYPE_CHECKING:
    from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker

logger = logging.getLogger(__name__)


@register_strategy("FROZEN_KV_MTP")
class FrozenKVDraftStrategy(BaseDraftStrategy):
    name = "frozen_kv"

    def __init__(self, worker: "FrozenKVMTPDraftWorker", cfg: SpecServingConfig):
        # The frozen worker has no draft-extend backend / graph runner.
        self.worker = worker
        self.cfg = cfg
        self.device = worker.device
        self.draft_runner = worker.draft_model_runner
        self.draft_attn_backend = worker.draft_attn_backend
        self.kv_context = worker.kv_context
        self.topk = worker.topk
        self.speculative_num_steps = worker.speculative_num_steps
        self.speculative_num_draft_tokens = worker.speculative_num_draft_tokens

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

    def _seed_topk(self, logits: torch.Tensor):
        if self.topk > 1:
            logits = logits[:: self.topk]
        return fast_topk(torch.softmax(logits, dim=-1), self.topk, dim=-1)

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward
    # expect: SG106
    def seed_forward(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return None
        if forward_batch.seq_lens_cpu is not None:
            forward_batch.seq_lens_sum = forward_batch.seq_lens_cpu.sum().item()
        else:
            forward_batch.seq_lens_sum = torch.sum(forward_batch.seq_lens).item()
        # Plan against the committed target-prefix geometry (view context);
        # the forward's own plan would not see the view, so it must not re-plan.
        with frozen_kv_target_view(
            forward_batch, self.kv_context, self.draft_attn_backend
        ):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

        self._seed_inputs(forward_batch)
        with (
            target_kv_pool_view(forward_batch, self.kv_context, self.draft_attn_backend),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_runner.forward(forward_batch).logits_output
        return self._seed_topk(seed_output.next_token_logits)

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward
    # expect: clean
    def seed_forward_checked(self, forward_batch: ForwardBatch):
        # A view-context plan can neither be redone by the forward nor survive
        # DP padding, so this strategy is refused under MLP sync.
        assert not require_mlp_sync(), (
            "frozen-KV MTP eager seed forward does not support DP attention / "
            "MLP sync; use the frozen-KV draft cuda graph"
        )
        if forward_batch.forward_mode.is_idle():
            return None
        if forward_batch.seq_lens_cpu is not None:
            forward_batch.seq_lens_sum = forward_batch.seq_lens_cpu.sum().item()
        else:
            forward_batch.seq_lens_sum = torch.sum(forward_batch.seq_lens).item()
        with frozen_kv_target_view(
            forward_batch, self.kv_context, self.draft_attn_backend
        ):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

        self._seed_inputs(forward_batch)
        with (
            target_kv_pool_view(forward_batch, self.kv_context, self.draft_attn_backend),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_runner.forward(forward_batch).logits_output
        return self._seed_topk(seed_output.next_token_logits)
