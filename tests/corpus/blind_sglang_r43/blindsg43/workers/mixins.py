"""Pre-planning mixin shared by the fork's EAGLE and standalone draft workers."""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker


class DraftPreplanMixin:
    """Plans a draft batch out of the forward path and records the plan.

    ``_multi_step_plan`` says whether the worker's draft backends are the
    multi-step wrapper kind, whose plan the runner cannot reproduce.
    """

    _multi_step_plan: bool = True

    @property
    def _replan_on_reshape(self) -> bool:
        return not self._multi_step_plan

    def _preplan(self, backend: AttentionBackend, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=self._replan_on_reshape
        )


class ForkStandaloneDraftWorker(DraftPreplanMixin, StandaloneDraftWorker):
    """Standalone (separate-vocab) draft model with hoisted planning."""

    # expect: SG106
    def draft_extend_eager(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> LogitsProcessorOutput:
        assert forward_batch.forward_mode.is_draft_extend_v2()
        self._preplan(self.draft_runner.attn_backend, forward_batch)
        out = self.draft_runner.forward(forward_batch).logits_output
        out.next_token_logits = out.next_token_logits[select_index]
        return out

    # expect: SG106
    def draft_steps_eager(
        self, forward_batch: ForwardBatch
    ) -> Tuple[
        Optional[torch.Tensor],
        Optional[torch.Tensor],
        Optional[torch.Tensor],
        Optional[torch.Tensor],
    ]:
        if self.speculative_num_steps > 1:
            self._preplan(self.draft_attn_backend, forward_batch)
        return self.draft_forward(forward_batch)


class SingleBackendDraftWorker(DraftPreplanMixin, EagleDraftWorker):
    """EAGLE draft worker whose draft-extend runs on the runner's own backend."""

    _multi_step_plan = False

    # expect: clean
    def draft_extend_eager(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> LogitsProcessorOutput:
        assert forward_batch.forward_mode.is_draft_extend_v2()
        self._preplan(self.draft_runner.attn_backend, forward_batch)
        out = self.draft_runner.forward(forward_batch).logits_output
        out.next_token_logits = out.next_token_logits[select_index]
        return out
