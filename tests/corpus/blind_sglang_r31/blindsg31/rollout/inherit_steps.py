"""Rollout step classes: one per draft-model family.

``BaseRolloutStep._plan`` is the single planning hook; families override it
when their backend cannot be re-planned by the forward path (DSA indexers keep
a deep_gemm schedule that does not survive a re-plan on a padded batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.dp_attention import is_dp_attention_enabled
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner


class BaseRolloutStep:
    def __init__(self, runner: "ModelRunner", attn_backend=None):
        self.runner = runner
        self.attn_backend = attn_backend or runner.attn_backend
        self.last_logits: Optional[torch.Tensor] = None

    def _plan(self, forward_batch: ForwardBatch) -> None:
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)

    def _seed(self, forward_batch: ForwardBatch, seed_ids: torch.Tensor) -> None:
        forward_batch.input_ids = seed_ids

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; inline plan + mark(replan_equivalent=True) + forward
    # expect: clean
    def decode(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        out = self.runner.forward(forward_batch).logits_output
        self.last_logits = out.next_token_logits
        return out


class StickyPlanRolloutStep(BaseRolloutStep):
    """DSA-indexer drafts: the pre-pad plan must be used as-is."""

    def _plan(self, forward_batch: ForwardBatch) -> None:
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (DSA note); subclass _plan marks without re-plan, then forward
    # expect: SG106
    def decode_with_seed(self, forward_batch: ForwardBatch, seed_ids: torch.Tensor):
        self._seed(forward_batch, seed_ids)
        if not forward_batch.forward_mode.is_idle():
            self._plan(forward_batch)
        out = self.runner.forward(forward_batch).logits_output
        self.last_logits = out.next_token_logits
        return out


class ReplanRolloutStep(BaseRolloutStep):
    """Plain-MLA drafts: inherits the base planning hook."""

    # idiom: model_executor/forward_batch_info.py mark_forward_metadata_ready(replan_equivalent=True); inherited base _plan, then forward
    # expect: clean
    def decode_with_seed(self, forward_batch: ForwardBatch, seed_ids: torch.Tensor):
        self._seed(forward_batch, seed_ids)
        if not forward_batch.forward_mode.is_idle():
            self._plan(forward_batch)
        out = self.runner.forward(forward_batch).logits_output
        self.last_logits = out.next_token_logits
        return out


class SingleDPStickyRolloutStep(StickyPlanRolloutStep):
    """DSA drafts on the single-DP-rank fleet."""

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (DSA note); sticky _plan but DP attention refused up front
    # expect: clean
    def decode_with_seed(self, forward_batch: ForwardBatch, seed_ids: torch.Tensor):
        if is_dp_attention_enabled():
            raise NotImplementedError(
                "sticky (non-replannable) draft plans cannot be DP-padded"
            )
        self._seed(forward_batch, seed_ids)
        if not forward_batch.forward_mode.is_idle():
            self._plan(forward_batch)
        out = self.runner.forward(forward_batch).logits_output
        self.last_logits = out.next_token_logits
        return out
