"""Fork EagerRunner: backstop for draft-extend pre-plans that DP padding outgrew."""

from __future__ import annotations

import logging

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.runner.eager_runner import EagerRunner

logger = logging.getLogger(__name__)


class ForkEagerRunner(EagerRunner):
    def _plan_is_stale(self, forward_batch: ForwardBatch) -> bool:
        num_tokens = (
            forward_batch.input_ids.shape[0] if forward_batch.input_ids is not None else 0
        )
        return (
            forward_batch.batch_size != forward_batch.forward_metadata_planned_bs
            or num_tokens != forward_batch.forward_metadata_planned_num_tokens
        )

    # idiom: sglang/srt/model_executor/runner/eager_runner.py EagerRunner.execute (override: re-plan a marked draft-extend batch whose plan record no longer matches, then super().execute)
    # expect: clean
    def execute(self, forward_batch: ForwardBatch, pp_proxy_tensors=None, **kwargs):
        if (
            forward_batch.forward_metadata_ready
            and forward_batch.forward_mode.is_draft_extend_v2()
            and self._plan_is_stale(forward_batch)
        ):
            # Planned by the draft runner's own backend before ModelRunner
            # padded it for DP attention: plan the padded batch instead.
            logger.debug(
                "re-planning draft-extend: planned bs=%s, padded bs=%s",
                forward_batch.forward_metadata_planned_bs,
                forward_batch.batch_size,
            )
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return super().execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors, **kwargs)
