"""Fork TpModelWorker variants that accept a pre-planned batch."""

from __future__ import annotations

from typing import Optional

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch

from blindsg23.common.config import (
    DEFAULT_DRAFT_PLAN_POLICY,
    DraftPlanPolicy,
)


class PrePlannedTpWorker(TpModelWorker):
    """Plans plain decode steps early (overlapping the previous step's sampling)."""

    def _decode_forward_batch(
        self, batch: ScheduleBatch, capture_hidden_mode: Optional[CaptureHiddenMode]
    ) -> ForwardBatch:
        assert batch.forward_mode.is_decode_or_idle(), batch.forward_mode
        return ForwardBatch.init_new(
            batch,
            self.model_runner,
            capture_hidden_mode=capture_hidden_mode,
            return_hidden_states_before_norm=False,
        )

    def _runs_eager(self, forward_batch: ForwardBatch) -> bool:
        """A replayed decode graph plans in its own load_batch; only the
        eager forward can use an early plan."""
        graph = self.model_runner.decode_cuda_graph_runner
        return graph is None or not graph.can_run_graph(forward_batch)

    # idiom: managers/tp_worker.py TpModelWorker.forward_batch_generation (forward_batch passed in, pre-planned)
    # expect: SG106
    def forward_preplanned(
        self,
        batch: ScheduleBatch,
        capture_hidden_mode: Optional[CaptureHiddenMode] = None,
    ):
        forward_batch = self._decode_forward_batch(batch, capture_hidden_mode)
        if self._runs_eager(forward_batch) and not forward_batch.forward_mode.is_idle():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.forward_batch_generation(None, forward_batch=forward_batch)

    # idiom: managers/tp_worker.py TpModelWorker.forward_batch_generation + forward_batch_info.py mark_forward_metadata_ready(replan_equivalent=True)
    # expect: clean
    def forward_preplanned_replannable(
        self,
        batch: ScheduleBatch,
        capture_hidden_mode: Optional[CaptureHiddenMode] = None,
    ):
        forward_batch = self._decode_forward_batch(batch, capture_hidden_mode)
        if self._runs_eager(forward_batch) and not forward_batch.forward_mode.is_idle():
            # Same backend object the eager forward plans with, no view
            # context: a post-pad re-plan is equivalent, so allow it.
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.forward_batch_generation(None, forward_batch=forward_batch)


class PolicyTpWorker(TpModelWorker):
    """Draft-side worker whose draft-extend planning follows a fork policy."""

    plan_policy: DraftPlanPolicy = DEFAULT_DRAFT_PLAN_POLICY

    def set_plan_policy(self, policy: DraftPlanPolicy) -> None:
        self.plan_policy = policy

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (policy-driven pre-plan) -> TpModelWorker.forward_batch_generation
    # expect: SG106
    def forward_draft_extend(self, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_draft_extend_v2() or forward_batch.forward_mode.is_idle()
        policy = self.plan_policy
        if policy is DraftPlanPolicy.LAZY or forward_batch.forward_mode.is_idle():
            return self.forward_batch_generation(None, forward_batch=forward_batch)
        self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=policy is DraftPlanPolicy.PREPLAN_REPLANNABLE
        )
        return self.forward_batch_generation(None, forward_batch=forward_batch)


class ReplannablePolicyTpWorker(PolicyTpWorker):
    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (policy-driven pre-plan, always re-plannable)
    # expect: clean
    def forward_draft_extend(self, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_draft_extend_v2() or forward_batch.forward_mode.is_idle()
        policy = self.plan_policy
        if policy is DraftPlanPolicy.LAZY or forward_batch.forward_mode.is_idle():
            return self.forward_batch_generation(None, forward_batch=forward_batch)
        # Either pre-plan policy: the plan is on the runner's own backend, so
        # the forward may always re-plan after DP padding.
        self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.forward_batch_generation(None, forward_batch=forward_batch)
