"""Draft-extend variants of the EAGLE v2 draft worker used by our serving fork.

The upstream path lives in ``EagleDraftWorker._draft_extend_for_decode`` and
``eagle_worker_common.prepare_for_draft_extend``; these overrides carry the
fork's eager fallbacks (no draft-extend CUDA graph on some SKUs).
"""

from __future__ import annotations

import functools
import logging
import os

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker

from blindsg12.spec.plan_helpers import (
    preplan_and_mark,
    preplan_only,
    preplan_replannable,
)

logger = logging.getLogger(__name__)


class ForkEagleDraftWorker(EagleDraftWorker):
    """EAGLE draft worker with eager draft-extend fallbacks."""

    def _can_replay_draft_extend(self, forward_batch: ForwardBatch) -> bool:
        runner = self.cuda_graph_runner_for_draft_extend
        return bool(runner and runner.can_run_graph(forward_batch))

    # expect: SG106
    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        """Eager draft extend: plan once here so the runner does not re-plan."""
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def _draft_extend_eager_replannable(self, forward_batch: ForwardBatch):
        """Same as above, but the plan is equivalent to the runner's own plan,
        so a post-pad re-plan is allowed."""
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def _draft_extend_graph_or_eager(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ):
        if self._can_replay_draft_extend(forward_batch):
            return self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        # Eager: leave planning to ModelRunner, which plans after DP padding.
        out = self.draft_runner.forward(forward_batch).logits_output
        out.next_token_logits = out.next_token_logits[select_index]
        return out

    # expect: SG106
    def _draft_extend_legacy(self, forward_batch: ForwardBatch):
        """Kept from the 0.5.6 port (eagle_worker.forward_draft_extend_after_decode)."""
        forward_batch.can_run_dp_cuda_graph = False
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        out = self.draft_runner.forward(forward_batch, skip_attn_backend_init=True)
        return out.logits_output

    # expect: clean
    def _draft_extend_legacy_dp_aware(self, forward_batch: ForwardBatch):
        forward_batch.can_run_dp_cuda_graph = False
        dp_attention = get_parallel().attn_dp_enabled
        if not forward_batch.forward_mode.is_idle() and not dp_attention:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        out = self.draft_runner.forward(
            forward_batch,
            skip_attn_backend_init=None if dp_attention else True,
        )
        return out.logits_output

    # expect: SG106
    def _draft_extend_with_kwargs(self, forward_batch: ForwardBatch, **extra):
        run_kwargs = {"skip_attn_backend_init": True}
        run_kwargs.update(extra)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.draft_runner.forward(forward_batch, **run_kwargs).logits_output

    # expect: SG106
    def _draft_extend_partial(self, forward_batch: ForwardBatch):
        run_preplanned = functools.partial(
            self.draft_runner.forward, skip_attn_backend_init=True
        )
        preplan_only(self.draft_runner.attn_backend, forward_batch)
        return run_preplanned(forward_batch).logits_output

    # expect: clean
    def _draft_extend_refuse_dp(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ):
        if self._can_replay_draft_extend(forward_batch):
            return self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        if get_parallel().attn_dp_enabled:
            raise RuntimeError(
                "eager draft extend with a pre-built plan is not supported "
                "with DP attention; enable the draft-extend CUDA graph"
            )
        preplan_and_mark(self.draft_runner.attn_backend, forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def _draft_extend_try_else(self, forward_batch: ForwardBatch):
        backend = self.draft_runner.attn_backend
        try:
            backend.init_forward_metadata(forward_batch)
        except NotImplementedError:
            logger.warning("draft backend cannot pre-plan; planning in forward")
        else:
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_fast(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        preplan_and_mark(self.draft_runner.attn_backend, forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_dp_early_return(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle() or get_parallel().attn_dp_enabled:
            # DP attention pads in ModelRunner; let it plan the padded batch.
            return self.draft_runner.forward(forward_batch).logits_output
        preplan_and_mark(self.draft_runner.attn_backend, forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_replannable_helper(self, forward_batch: ForwardBatch):
        preplan_replannable(self.draft_runner.attn_backend, forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_env_gated(self, forward_batch: ForwardBatch):
        if os.environ.get("SGLANG_FORK_PREPLAN_DRAFT_EXTEND", "1") == "1":
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_env_gated_dp_safe(self, forward_batch: ForwardBatch):
        preplan = os.environ.get("SGLANG_FORK_PREPLAN_DRAFT_EXTEND", "1") == "1"
        if preplan and forward_batch.global_num_tokens_cpu is None:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output


class ForkStandaloneDraftWorker(StandaloneDraftWorker):
    """Standalone draft model; the mark arguments come from properties so the
    TP-only deployment can opt out of post-pad re-plans."""

    @property
    def _extend_mark_kwargs(self) -> dict:
        return {}

    @property
    def _padded_mark_kwargs(self) -> dict:
        return {"replan_equivalent": True}

    # expect: SG106
    def run_draft_extend(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(**self._extend_mark_kwargs)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def run_draft_extend_padded(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(**self._padded_mark_kwargs)
        return self.draft_runner.forward(forward_batch).logits_output
