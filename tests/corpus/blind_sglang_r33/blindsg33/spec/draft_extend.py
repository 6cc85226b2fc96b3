"""Draft-extend batch builders for the lab's block/tree drafters.

Forked from ``speculative/eagle_worker_common.py::prepare_for_draft_extend``
so the drafters can stage windows wider than ``num_draft_tokens``.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
    PPProxyTensors,
)
from sglang.srt.model_executor.model_runner import ModelRunner, ModelRunnerOutput
from sglang.srt.utils.common import is_npu, require_gathered_buffer, require_mlp_sync


def _stage_draft_extend(
    draft_extend_input: Any,
    batch: ScheduleBatch,
    predict: torch.Tensor,
    num_draft_tokens: int,
    draft_model_runner: ModelRunner,
) -> ForwardBatch:
    bs = len(batch.seq_lens)
    batch.spec_info = draft_extend_input
    batch.input_ids = predict
    batch.prefix_lens = batch.seq_lens.to(torch.int32)
    batch.extend_lens = torch.full(
        (bs,), num_draft_tokens, dtype=torch.int32, device=batch.seq_lens.device
    )
    batch.extend_num_tokens = bs * num_draft_tokens
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DRAFT_EXTEND_V2
    )
    forward_batch = ForwardBatch.init_new(
        batch,
        draft_model_runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_hidden_states_before_norm=False,
    )
    forward_batch.seq_lens = forward_batch.seq_lens + num_draft_tokens
    forward_batch.extend_seq_lens_cpu = [num_draft_tokens] * bs
    return forward_batch


# idiom: speculative/eagle_worker_common.py prepare_for_draft_extend — module-level fork: stages the DRAFT_EXTEND_V2 batch, plans it on the draft runner's backend when no graph will run, marks it (DSA indexer note kept)
# expect: SG106
def prepare_draft_extend_batch(
    draft_extend_input: Any,
    batch: ScheduleBatch,
    predict: torch.Tensor,
    num_draft_tokens: int,
    draft_model_runner: ModelRunner,
    cuda_graph_runner: Optional[Any] = None,
) -> ForwardBatch:
    forward_batch = _stage_draft_extend(
        draft_extend_input, batch, predict, num_draft_tokens, draft_model_runner
    )
    can_run_graph = cuda_graph_runner and cuda_graph_runner.can_run_graph(forward_batch)
    if not batch.forward_mode.is_idle() and not can_run_graph:
        draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        # DSA's indexer cannot rebuild its schedule on a reshaped batch, so
        # keep the pre-planned metadata.
        forward_batch.mark_forward_metadata_ready()
    return forward_batch


# idiom: speculative/eagle_worker_common.py prepare_for_draft_extend — module-level fork: plans on the draft runner's backend and marks with replan_equivalent=True
# expect: clean
def prepare_draft_extend_batch_v2(
    draft_extend_input: Any,
    batch: ScheduleBatch,
    predict: torch.Tensor,
    num_draft_tokens: int,
    draft_model_runner: ModelRunner,
    cuda_graph_runner: Optional[Any] = None,
) -> ForwardBatch:
    forward_batch = _stage_draft_extend(
        draft_extend_input, batch, predict, num_draft_tokens, draft_model_runner
    )
    can_run_graph = cuda_graph_runner and cuda_graph_runner.can_run_graph(forward_batch)
    if not batch.forward_mode.is_idle() and not can_run_graph:
        draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    return forward_batch


class DeferredPlanDraftExtend:
    """Draft-extend stager; NPU builds defer planning to forward_extend."""

    def __init__(self, draft_model_runner: ModelRunner, num_draft_tokens: int):
        self.draft_model_runner = draft_model_runner
        self.num_draft_tokens = num_draft_tokens
        self._defer_to_forward = is_npu()

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (NPU branch) — plans, then marks unless the instance was built with _defer_to_forward (set from is_npu())
    # expect: SG106
    def prepare(self, draft_extend_input, batch: ScheduleBatch, predict: torch.Tensor):
        forward_batch = _stage_draft_extend(
            draft_extend_input,
            batch,
            predict,
            self.num_draft_tokens,
            self.draft_model_runner,
        )
        if forward_batch.forward_mode.is_idle():
            return forward_batch
        self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        if not self._defer_to_forward:
            forward_batch.mark_forward_metadata_ready()
        return forward_batch


class PostPadDraftRunner(ModelRunner):
    """Draft runner that plans draft-extend batches inside the forward."""

    # idiom: model_executor/model_runner.py ModelRunner._prepare_eager_forward_batch — override: super() (MLP-sync padding) first, then plan the DRAFT_EXTEND_V2 batch and mark it
    # expect: clean
    def _prepare_eager_forward_batch(self, forward_batch: ForwardBatch) -> None:
        super()._prepare_eager_forward_batch(forward_batch)
        if (
            forward_batch.forward_mode.is_draft_extend_v2()
            and forward_batch.needs_forward_metadata_init()
        ):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()


class PrePlanningDraftRunner(ModelRunner):
    """Draft runner that plans draft-extend batches on entry to forward()."""

    # idiom: model_executor/model_runner.py ModelRunner.forward — override: plans an unplanned DRAFT_EXTEND_V2 batch and marks it, then calls super().forward
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
            forward_batch.forward_mode.is_draft_extend_v2()
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


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode — eager draft extend that pre-plans and marks only when require_gathered_buffer() is false
# expect: SG106
def run_draft_extend_gathered(
    draft_model_runner: ModelRunner,
    forward_batch: ForwardBatch,
):
    if not forward_batch.forward_mode.is_idle() and not require_gathered_buffer():
        draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return draft_model_runner.forward(forward_batch).logits_output


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode — eager draft extend that pre-plans and marks only when require_mlp_sync() is false
# expect: clean
def run_draft_extend_synced(
    draft_model_runner: ModelRunner,
    forward_batch: ForwardBatch,
):
    if not forward_batch.forward_mode.is_idle() and not require_mlp_sync():
        draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return draft_model_runner.forward(forward_batch).logits_output
