"""Draft-extend stage used by the fork's spec-v2 scheduler hooks.

Every entry point builds a DRAFT_EXTEND_V2 / EXTEND batch for the draft model
and runs it eagerly on the draft ``ModelRunner``. The variants differ in how
(and whether) they pre-plan attention metadata on the plan stream.
"""

from __future__ import annotations

import logging
from typing import Any

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
)

from .plan_helpers import (
    make_forward,
    make_preplanned_forward,
    preplan_draft_batch,
    preplan_if_rank_local,
    run_eager,
)

logger = logging.getLogger(__name__)


class _NeedsPostPadPlan(Exception):
    """Raised when the batch will be reshaped by DP padding."""


class _DraftExtendStageBase:
    def __init__(self, draft_worker: Any):
        self.draft_worker = draft_worker
        self.draft_runner = draft_worker.draft_runner
        # The draft runner's own backend: what ModelRunner.forward plans on.
        self.attn_backend = draft_worker.draft_runner.attn_backend
        self.plan_stream_ctx = draft_worker.plan_stream_ctx

    def _new_forward_batch(self, batch: ScheduleBatch) -> ForwardBatch:
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
        )
        forward_batch.return_logprob = False
        return forward_batch

    def _finish(self, logits_output):
        return logits_output.next_token_logits, logits_output.hidden_states


class DraftExtendStage(_DraftExtendStageBase):
    # expect: SG106
    def run_with_kwargs(self, batch: ScheduleBatch):
        forward_batch = self._new_forward_batch(batch)
        with self.plan_stream_ctx:
            self.attn_backend.init_forward_metadata(forward_batch)
        fwd_kwargs = {
            "forward_batch": forward_batch,
            "skip_attn_backend_init": True,
        }
        out = self.draft_runner.forward(**fwd_kwargs)
        return self._finish(out.logits_output)

    # expect: clean
    def run_with_kwargs_dp_aware(self, batch: ScheduleBatch):
        forward_batch = self._new_forward_batch(batch)
        fwd_kwargs = {}
        if forward_batch.global_num_tokens_cpu is None:
            # Not DP-synchronised: the forward will not pad this batch.
            with self.plan_stream_ctx:
                self.attn_backend.init_forward_metadata(forward_batch)
            fwd_kwargs["skip_attn_backend_init"] = True
        out = self.draft_runner.forward(forward_batch, **fwd_kwargs)
        return self._finish(out.logits_output)

    # expect: SG106
    def run_via_factory(self, batch: ScheduleBatch):
        forward_batch = self._new_forward_batch(batch)
        with self.plan_stream_ctx:
            self.attn_backend.init_forward_metadata(forward_batch)
        forward = make_preplanned_forward(self.draft_runner)
        return self._finish(forward(forward_batch).logits_output)

    # expect: clean
    def run_via_plain_factory(self, batch: ScheduleBatch):
        forward_batch = self._new_forward_batch(batch)
        with self.plan_stream_ctx:
            self.attn_backend.init_forward_metadata(forward_batch)
        forward = make_forward(self.draft_runner)
        return self._finish(forward(forward_batch).logits_output)

    # expect: SG106
    def run_preplanned(self, batch: ScheduleBatch):
        with self.plan_stream_ctx:
            forward_batch = preplan_draft_batch(
                self.attn_backend, self._new_forward_batch(batch)
            )
        return self._finish(run_eager(self.draft_runner, forward_batch))

    # expect: clean
    def run_preplanned_local(self, batch: ScheduleBatch):
        forward_batch = self._new_forward_batch(batch)
        with self.plan_stream_ctx:
            preplan_if_rank_local(self.attn_backend, forward_batch)
        return self._finish(run_eager(self.draft_runner, forward_batch))

    # expect: SG106
    def run_conditional(self, batch: ScheduleBatch):
        forward_batch = self._new_forward_batch(batch)
        planned = not forward_batch.forward_mode.is_idle()
        if planned:
            self.attn_backend.init_forward_metadata(forward_batch)
        out = self.draft_runner.forward(
            forward_batch,
            skip_attn_backend_init=True if planned else None,
        )
        return self._finish(out.logits_output)

    # expect: clean
    def run_conditional_dp_aware(self, batch: ScheduleBatch):
        forward_batch = self._new_forward_batch(batch)
        planned = (
            not forward_batch.forward_mode.is_idle()
            and forward_batch.global_num_tokens_cpu is None
        )
        if planned:
            self.attn_backend.init_forward_metadata(forward_batch)
        out = self.draft_runner.forward(
            forward_batch,
            skip_attn_backend_init=True if planned else None,
        )
        return self._finish(out.logits_output)

    # expect: SG106
    def run_lambda(self, batch: ScheduleBatch):
        forward_batch = self._new_forward_batch(batch)
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        run = lambda fb: self.draft_runner.forward(fb).logits_output  # noqa: E731
        return self._finish(run(forward_batch))

    # expect: clean
    def run_lambda_replannable(self, batch: ScheduleBatch):
        forward_batch = self._new_forward_batch(batch)
        self.attn_backend.init_forward_metadata(forward_batch)
        mark = lambda fb: fb.mark_forward_metadata_ready(  # noqa: E731
            replan_equivalent=True
        )
        mark(forward_batch)
        run = lambda fb: self.draft_runner.forward(fb).logits_output  # noqa: E731
        return self._finish(run(forward_batch))

    # expect: SG106
    def run_guarded(self, batch: ScheduleBatch):
        forward_batch = self._new_forward_batch(batch)
        try:
            with self.plan_stream_ctx:
                self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        except (RuntimeError, AssertionError):
            logger.warning("draft-extend pre-plan failed; planning in forward")
        out = self.draft_runner.forward(forward_batch)
        return self._finish(out.logits_output)

    # expect: clean
    def run_guarded_dp_aware(self, batch: ScheduleBatch):
        forward_batch = self._new_forward_batch(batch)
        try:
            if forward_batch.global_num_tokens_cpu is not None:
                raise _NeedsPostPadPlan()
            with self.plan_stream_ctx:
                self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        except _NeedsPostPadPlan:
            logger.debug("DP-synchronised draft extend: planning after padding")
        out = self.draft_runner.forward(forward_batch)
        return self._finish(out.logits_output)

    # expect: clean
    def run_early_return(self, batch: ScheduleBatch):
        forward_batch = self._new_forward_batch(batch)
        if (
            forward_batch.global_num_tokens_cpu is not None
            or forward_batch.forward_mode.is_idle()
        ):
            # DP padding reshapes the batch inside forward: plan there.
            return self._finish(self.draft_runner.forward(forward_batch).logits_output)
        with self.plan_stream_ctx:
            self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self._finish(self.draft_runner.forward(forward_batch).logits_output)
