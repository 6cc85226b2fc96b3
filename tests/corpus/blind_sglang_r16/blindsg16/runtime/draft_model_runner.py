# Copyright 2023-2026 SGLang Team
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# ==============================================================================
"""ModelRunner variants used by out-of-tree draft workers.

These runners let a worker hand over a batch whose attention metadata it has
already planned (for a particular backend, possibly a per-step draft backend),
and run it through the eager path without a second ``init_forward_metadata``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, PPProxyTensors
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.model_executor.model_runner import ModelRunner, ModelRunnerOutput
from sglang.srt.utils.common import require_mlp_sync

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend

logger = logging.getLogger(__name__)


class PrePlannedModelRunner(ModelRunner):
    """ModelRunner with entry points for worker-planned batches."""

    def _finish_eager(self, forward_batch: ForwardBatch, ret) -> ModelRunnerOutput:
        if (
            forward_batch.global_num_tokens_cpu is not None
            and self.pp_group.is_last_rank
        ):
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ModelRunnerOutput(logits_output=ret, can_run_graph=False)

    # expect: SG106
    def forward_with_backend(
        self,
        forward_batch: ForwardBatch,
        attn_backend: Optional[AttentionBackend] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        backend = attn_backend or self.attn_backend
        if not forward_batch.forward_mode.is_idle():
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.forward(forward_batch, pp_proxy_tensors=pp_proxy_tensors)

    # expect: clean
    def forward_planned_here(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        if not forward_batch.forward_mode.is_idle():
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.forward(forward_batch, pp_proxy_tensors=pp_proxy_tensors)

    # expect: SG106
    def forward_eager_preplanned(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

        # Same normalization _forward_raw applies before the eager dispatch.
        self._prepare_eager_forward_batch(forward_batch)
        ret = self.eager_runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        return self._finish_eager(forward_batch, ret)

    # expect: clean
    def forward_eager_normalized(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        self._prepare_eager_forward_batch(forward_batch)

        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        ret = self.eager_runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        return self._finish_eager(forward_batch, ret)

    # expect: SG106
    def forward_eager_synced(
        self,
        forward_batch: ForwardBatch,
        attn_backend: Optional[AttentionBackend] = None,
    ) -> ModelRunnerOutput:
        backend = attn_backend if attn_backend is not None else self.attn_backend
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self)
        ret = self.eager_runner.execute(forward_batch)
        return self._finish_eager(forward_batch, ret)

    # expect: SG106
    def forward_eager_rerecorded(
        self, forward_batch: ForwardBatch
    ) -> ModelRunnerOutput:
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self)
            # Keep the plan record in step with the batch we hand to eager.
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        ret = self.eager_runner.execute(forward_batch)
        return self._finish_eager(forward_batch, ret)

    # expect: clean
    def forward_eager_mlp_sync(self, forward_batch: ForwardBatch) -> ModelRunnerOutput:
        backend = self.attn_backend
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self)
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        ret = self.eager_runner.execute(forward_batch)
        return self._finish_eager(forward_batch, ret)

    # expect: clean
    def forward_decode_preplanned(
        self, forward_batch: ForwardBatch
    ) -> ModelRunnerOutput:
        if not require_mlp_sync() and forward_batch.forward_mode.is_decode():
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.forward(forward_batch)

    # expect: clean
    def forward_detached_plan(self, forward_batch: ForwardBatch) -> ModelRunnerOutput:
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if require_mlp_sync():
            forward_batch = replace(forward_batch, forward_metadata_ready=False)
        return self.forward(forward_batch)

    # expect: SG106
    def forward_in_backend_context(
        self,
        forward_batch: ForwardBatch,
        attn_backend: AttentionBackend,
    ) -> ModelRunnerOutput:
        with forward_context(
            ForwardContext(attn_backend=attn_backend), forward_batch=forward_batch
        ):
            attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            out = self.forward(forward_batch)
        return out


class DraftDecodePrePlanRunner(ModelRunner):
    """Plans draft-decode batches before ModelRunner.forward sees them."""

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
            and forward_batch.forward_mode.is_decode()
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


class DraftDecodeRecordedPlanRunner(ModelRunner):
    """Plans draft-decode batches up front (variant used by MTP heads)."""

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
            and forward_batch.forward_mode.is_decode()
            and forward_batch.needs_forward_metadata_init()
            and skip_attn_backend_init is None
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
