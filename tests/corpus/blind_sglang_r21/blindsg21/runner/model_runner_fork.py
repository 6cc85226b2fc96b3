"""ModelRunner overrides for the fork's draft runners.

``ModelRunner._forward_raw`` calls ``_prepare_eager_forward_batch`` (MLP-sync
padding for DP attention) right before the eager runner decides, through
``ForwardBatch.needs_forward_metadata_init()``, whether to plan attention.
These subclasses hook that seam.  They are installed as the draft worker's
runner class by the fork's worker factory; the draft runner's ``attn_backend``
is the draft-extend backend.
"""

from __future__ import annotations

from typing import Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, PPProxyTensors
from sglang.srt.model_executor.model_runner import ModelRunner


class OverlapPlanModelRunner(ModelRunner):
    """Starts the draft-extend plan before the MLP-sync all-gather so the
    host-side part of the plan overlaps the collective."""

    # expect: SG106
    def _prepare_eager_forward_batch(self, forward_batch: ForwardBatch) -> None:
        early = (
            forward_batch.forward_mode.is_draft_extend_v2()
            and forward_batch.needs_forward_metadata_init()
        )
        if early:
            self.attn_backend.init_forward_metadata(forward_batch)
        super()._prepare_eager_forward_batch(forward_batch)
        if early:
            # Record the final shapes so the runner's staleness check is happy.
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)


class ReplanningModelRunner(ModelRunner):
    """Backstop for draft-extend batches pre-planned by a worker: re-plan when
    the MLP-sync padding changed the request count after the plan."""

    # expect: clean
    def _prepare_eager_forward_batch(self, forward_batch: ForwardBatch) -> None:
        super()._prepare_eager_forward_batch(forward_batch)
        if (
            forward_batch.forward_mode.is_draft_extend_v2()
            and forward_batch.forward_metadata_ready
            and forward_batch.batch_size != forward_batch.forward_metadata_planned_bs
        ):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()


class PostPadPlanningModelRunner(ModelRunner):
    """Plans draft-extend batches itself, on the padded batch, and marks them so
    the eager runner does not plan a second time."""

    @property
    def _draft_extend_planner(self):
        return self.attn_backend.init_forward_metadata

    def _prepare_eager_forward_batch(self, forward_batch: ForwardBatch) -> None:
        super()._prepare_eager_forward_batch(forward_batch)
        if (
            forward_batch.forward_mode.is_draft_extend_v2()
            and forward_batch.needs_forward_metadata_init()
        ):
            self._draft_extend_planner(forward_batch)
            forward_batch.mark_forward_metadata_ready()


class MarkScrubbingModelRunner(ModelRunner):
    """Drops readiness marks that DP padding is about to invalidate."""

    # expect: clean
    def forward(
        self,
        forward_batch: ForwardBatch,
        skip_attn_backend_init: Optional[bool] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ):
        forward_batch.apply_deprecated_skip_attn_backend_init(skip_attn_backend_init)
        if (
            forward_batch.forward_metadata_ready
            and forward_batch.forward_mode.is_draft_extend_v2()
            and forward_batch.global_num_tokens_cpu is not None
        ):
            # _forward_raw pads this batch for DP attention; a plan made by the
            # caller describes the unpadded one.
            forward_batch.forward_metadata_ready = False
        return super().forward(
            forward_batch,
            pp_proxy_tensors=pp_proxy_tensors,
            reinit_attn_backend=reinit_attn_backend,
            split_forward_count=split_forward_count,
        )
