"""Standalone (small dense draft model) worker with an eager draft extend.

The draft-extend batch comes in unplanned (DRAFT_EXTEND_V2, built by
``build_draft_extend_batch`` in the scheduler mixin).
"""

from __future__ import annotations

import functools
from typing import Any, Dict

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker


class StandaloneDraftExtendWorker(StandaloneDraftWorker):
    def setup_eager_draft_extend(self) -> None:
        # The standalone draft plans its extend batch right after building it
        # (on the plan stream), so the runner must not plan again.
        self._draft_fwd_kwargs: Dict[str, Any] = {"skip_attn_backend_init": True}

    def _plan_extend(self, forward_batch: ForwardBatch) -> None:
        if not forward_batch.forward_mode.is_idle():
            with self.plan_stream_ctx:
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)

    # expect: SG106
    def draft_extend_partial(self, forward_batch: ForwardBatch):
        run = functools.partial(self.draft_runner.forward, skip_attn_backend_init=True)
        self._plan_extend(forward_batch)
        return run(forward_batch).logits_output

    # expect: clean
    def draft_extend_partial_replan(self, forward_batch: ForwardBatch):
        mark_planned = functools.partial(
            forward_batch.mark_forward_metadata_ready, replan_equivalent=True
        )
        self._plan_extend(forward_batch)
        mark_planned()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_kwargs(self, forward_batch: ForwardBatch):
        self._plan_extend(forward_batch)
        out = self.draft_runner.forward(forward_batch, **self._draft_fwd_kwargs)
        return out.logits_output

    # expect: clean
    def draft_extend_kwargs_dp(self, forward_batch: ForwardBatch):
        self._plan_extend(forward_batch)
        # With DP attention the runner pads first; let it plan the padded batch.
        fwd_kwargs = {
            "skip_attn_backend_init": (
                None if get_parallel().attn_dp_enabled else True
            )
        }
        return self.draft_runner.forward(forward_batch, **fwd_kwargs).logits_output
