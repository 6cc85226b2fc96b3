"""FlashInfer (MHA) backend variants used by the fork's draft runners."""

from __future__ import annotations

import logging
from typing import Optional

from sglang.srt.layers.attention.flashinfer_backend import (
    FlashInferAttnBackend,
    FlashInferMultiStepDraftBackend,
)
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

logger = logging.getLogger(__name__)


class PlanRecordingFlashInferAttnBackend(FlashInferAttnBackend):
    """Draft-extend backend that records each plan on the batch it planned.

    Installed as the draft runner's ``attn_backend``; the worker plans on the
    plan stream and the record keeps ModelRunner from planning twice.
    """

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_draft_extend_v2():
            forward_batch.mark_forward_metadata_ready()
        self.last_planned_bs: Optional[int] = forward_batch.batch_size


class PlanSharingFlashInferAttnBackend(FlashInferAttnBackend):
    """Same as above, but the record allows the runner to re-plan on a
    reshaped batch: a re-plan goes through this same object."""

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_draft_extend_v2():
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        self.last_planned_bs: Optional[int] = forward_batch.batch_size


class CountingMultiStepDraftBackend(FlashInferMultiStepDraftBackend):
    """Multi-step draft backend that counts eager plans (for the fork's
    planning-overhead metrics)."""

    def __init__(self, model_runner, topk: int, speculative_num_steps: int):
        super().__init__(model_runner, topk, speculative_num_steps)
        self.num_eager_plans = 0

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        self.num_eager_plans += 1
        super().init_forward_metadata(forward_batch)
