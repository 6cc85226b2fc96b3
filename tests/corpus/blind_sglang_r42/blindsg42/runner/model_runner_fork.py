"""ModelRunner subclasses used by the fork's draft and target workers.

Each overrides one hook of ``ModelRunner`` (``forward``, ``_forward_raw`` or
``_prepare_eager_forward_batch``) and calls ``super()`` around it.
"""

from __future__ import annotations

import logging
from typing import Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, PPProxyTensors
from sglang.srt.model_executor.model_runner import ModelRunner, ModelRunnerOutput

logger = logging.getLogger(__name__)


class DraftExtendPlanningModelRunner(ModelRunner):
    """Draft runner that plans DRAFT_EXTEND_V2 batches at the forward entry,
    before the canary / step-span contexts are entered, so the plan shows up
    outside the step span in traces."""

    # expect: SG106
    def forward(
        self,
        forward_batch: ForwardBatch,
        skip_attn_backend_init: Optional[bool] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        if (
            self.is_draft_worker
            and forward_batch.forward_mode.is_draft_extend_v2()
            and skip_attn_backend_init is None
            and forward_batch.needs_forward_metadata_init()
        ):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return super().forward(
            forward_batch,
            skip_attn_backend_init=skip_attn_backend_init,
            pp_proxy_tensors=pp_proxy_tensors,
            reinit_attn_backend=reinit_attn_backend,
            split_forward_count=split_forward_count,
        )


class EntryPlanningModelRunner(ModelRunner):
    """Same entry-point planning, recorded as replan-equivalent (the runner's
    own backend planned it)."""

    # expect: clean
    def forward(
        self,
        forward_batch: ForwardBatch,
        skip_attn_backend_init: Optional[bool] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        if (
            self.is_draft_worker
            and forward_batch.forward_mode.is_draft_extend_v2()
            and skip_attn_backend_init is None
            and forward_batch.needs_forward_metadata_init()
        ):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return super().forward(
            forward_batch,
            skip_attn_backend_init=skip_attn_backend_init,
            pp_proxy_tensors=pp_proxy_tensors,
            reinit_attn_backend=reinit_attn_backend,
            split_forward_count=split_forward_count,
        )


class MultiStepDraftModelRunner(ModelRunner):
    """Draft runner that plans the multi-step draft backend on the first step
    of a draft-decode batch; later steps reuse that plan."""

    # expect: SG106
    def _forward_raw(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors],
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        draft_attn_backend = getattr(self, "draft_attn_backend", None)
        if (
            self.is_draft_worker
            and draft_attn_backend is not None
            and forward_batch.forward_mode.is_decode()
            and forward_batch.needs_forward_metadata_init()
        ):
            draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return super()._forward_raw(
            forward_batch,
            pp_proxy_tensors,
            reinit_attn_backend,
            split_forward_count,
        )


class RawForwardDraftModelRunner(ModelRunner):
    """Plans DRAFT_EXTEND_V2 batches inside ``_forward_raw`` when the batch
    carries no MLP-sync geometry (no padding will follow)."""

    # expect: clean
    def _forward_raw(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors],
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        if (
            self.is_draft_worker
            and forward_batch.forward_mode.is_draft_extend_v2()
            and forward_batch.global_num_tokens_cpu is None
            and forward_batch.needs_forward_metadata_init()
        ):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return super()._forward_raw(
            forward_batch,
            pp_proxy_tensors,
            reinit_attn_backend,
            split_forward_count,
        )


class EagerPrepModelRunner(ModelRunner):
    """Re-plans a pre-planned draft-extend batch once MLP-sync padding has
    reshaped it (the eager path runs this right after the padding)."""

    # expect: clean
    def _prepare_eager_forward_batch(self, forward_batch: ForwardBatch) -> None:
        planned_bs = forward_batch.forward_metadata_planned_bs
        planned_num_tokens = forward_batch.forward_metadata_planned_num_tokens
        super()._prepare_eager_forward_batch(forward_batch)
        if not forward_batch.forward_metadata_ready:
            return
        if not forward_batch.forward_mode.is_draft_extend_v2():
            return
        num_tokens = (
            forward_batch.input_ids.shape[0]
            if forward_batch.input_ids is not None
            else 0
        )
        if (
            forward_batch.batch_size != planned_bs
            or num_tokens != planned_num_tokens
        ):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
