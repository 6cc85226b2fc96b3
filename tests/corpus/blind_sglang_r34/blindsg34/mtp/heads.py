"""Multi-layer MTP heads: one ModelRunner (and one attention backend) per
NextN layer, chained step by step, as in SGLang's multi-layer EAGLE worker."""

from __future__ import annotations

import logging
from typing import Dict, List, Sequence

import torch

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.runtime_context import get_parallel, get_spec
from sglang.srt.server_args import ServerArgs

from blindsg34.mtp.draft_runner import MTPDraftRunner
from blindsg34.mtp.flags import (
    dp_attention_enabled,
    mlp_sync_required,
    two_batch_overlap_enabled,
)
from blindsg34.mtp.planning import (
    maybe_plan_topk,
    plan_for_overlap,
    plan_unless_mlp_sync,
    preplan,
    preplan_and_mark,
    stamp_planned,
    stamp_planned_preserving,
)

logger = logging.getLogger(__name__)


class MultiLayerMTPDraftWorker:
    def __init__(
        self,
        server_args: ServerArgs,
        draft_runner_list: Sequence[ModelRunner],
    ):
        self.server_args = server_args
        self.draft_runner_list = list(draft_runner_list)
        self.speculative_num_steps = get_spec().speculative_num_steps
        self.speculative_num_draft_tokens = get_spec().speculative_num_draft_tokens
        self.topk = get_spec().speculative_eagle_topk
        self.enable_dp_attention = server_args.enable_dp_attention
        # DSA's indexer cannot rebuild its deep_gemm schedule on a DP-padded
        # batch (#27091), so the forward must not re-plan under DP attention.
        self._mark_kwargs = {"replan_equivalent": not get_parallel().attn_dp_enabled}

    def mtp_model_runner(self, step: int) -> ModelRunner:
        return self.draft_runner_list[step]

    def _bind_step_pools(self, forward_batch: ForwardBatch, step: int) -> None:
        runner = self.mtp_model_runner(step)
        forward_batch.req_to_token_pool = runner.req_to_token_pool
        forward_batch.token_to_kv_pool = runner.token_to_kv_pool

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode (eager per-step loop)
    # expect: SG106
    def _run_heads_shared_plan(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        if not forward_batch.forward_mode.is_idle():
            # Every head shares head 0's geometry: plan once, reuse it.
            self.mtp_model_runner(0).attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            out = self.mtp_model_runner(step).forward(forward_batch).logits_output
            logits.append(out.next_token_logits[select_index])
        return logits

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode (eager per-step loop)
    # expect: clean
    def _run_heads_unmarked(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        logits: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            runner = self.mtp_model_runner(step)
            # Warm plan only; left unmarked so each step's forward plans its
            # own backend after prepare_mlp_sync_batch.
            preplan(runner.attn_backend, forward_batch)
            out = runner.forward(forward_batch).logits_output
            logits.append(out.next_token_logits[select_index])
        return logits

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (mark_forward_metadata_ready(replan_equivalent=...))
    # expect: SG106
    def _draft_extend_eager(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        runner = self.mtp_model_runner(0)
        if forward_batch.forward_mode.is_idle():
            return runner.forward(forward_batch).logits_output
        runner.attn_backend.init_forward_metadata(forward_batch)
        # Re-plan is only "equivalent" without DP: under DP the indexer
        # schedule must stay the pre-pad one.
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=not self.enable_dp_attention
        )
        return runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (mark_forward_metadata_ready(replan_equivalent=...))
    # expect: clean
    def _draft_extend_eager_mlp_sync(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        runner = self.mtp_model_runner(0)
        if forward_batch.forward_mode.is_idle():
            return runner.forward(forward_batch).logits_output
        runner.attn_backend.init_forward_metadata(forward_batch)
        # Dense MLA head, runner's own backend: re-plan whenever MLP sync can
        # reshape the batch.
        forward_batch.mark_forward_metadata_ready(replan_equivalent=mlp_sync_required())
        return runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/batch_overlap/two_batch_overlap.py TboForwardBatchPreparer (guard clause on server args before pre-planning)
    # expect: SG106
    def _maybe_preplan_extend(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        runner = self.mtp_model_runner(0)
        if forward_batch.forward_mode.is_idle():
            return runner.forward(forward_batch).logits_output
        if two_batch_overlap_enabled(self.server_args):
            # TBO children are planned by the TBO-aware flow; never pre-plan.
            return runner.forward(forward_batch).logits_output
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/batch_overlap/two_batch_overlap.py TboForwardBatchPreparer (guard clause on server args before pre-planning)
    # expect: clean
    def _maybe_preplan_extend_dp_guard(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        runner = self.mtp_model_runner(0)
        if forward_batch.forward_mode.is_idle():
            return runner.forward(forward_batch).logits_output
        if dp_attention_enabled(self.server_args) or mlp_sync_required():
            # The forward pads for DP attention; let it plan afterwards.
            return runner.forward(forward_batch).logits_output
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (plan_stream_ctx)
    # expect: SG106
    def _head_step_from_plan(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        runner = self.mtp_model_runner(0)
        forward_batch, planned = plan_for_overlap(runner.attn_backend, forward_batch)
        if planned:
            forward_batch.mark_forward_metadata_ready()
        return runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (plan_stream_ctx)
    # expect: clean
    def _head_step_from_plan_gated(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        runner = self.mtp_model_runner(0)
        forward_batch, planned = plan_unless_mlp_sync(runner.attn_backend, forward_batch)
        if planned:
            forward_batch.mark_forward_metadata_ready()
        return runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleWorkerV2.forward_batch_generation (draft / draft-extend phases)
    # expect: SG106
    def _run_planned_phases(
        self, phases: Dict[str, ForwardBatch]
    ) -> Dict[str, LogitsProcessorOutput]:
        runner = self.mtp_model_runner(0)
        planned: Dict[str, ForwardBatch] = {}
        for name, forward_batch in phases.items():
            if forward_batch.forward_mode.is_idle():
                planned[name] = forward_batch
                continue
            planned[name] = preplan_and_mark(runner.attn_backend, forward_batch)
        return {
            name: runner.forward(forward_batch).logits_output
            for name, forward_batch in planned.items()
        }

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleWorkerV2.forward_batch_generation (draft / draft-extend phases)
    # expect: clean
    def _run_planned_phases_replannable(
        self, phases: Dict[str, ForwardBatch]
    ) -> Dict[str, LogitsProcessorOutput]:
        runner = self.mtp_model_runner(0)
        planned: Dict[str, ForwardBatch] = {}
        for name, forward_batch in phases.items():
            if forward_batch.forward_mode.is_idle():
                planned[name] = forward_batch
                continue
            planned[name] = preplan_and_mark(
                runner.attn_backend, forward_batch, replan_equivalent=True
            )
        return {
            name: runner.forward(forward_batch).logits_output
            for name, forward_batch in planned.items()
        }

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (topk > 1 tree draft)
    # expect: SG106
    def _draft_topk_tree(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        runner = self.mtp_model_runner(0)
        planned = None
        if not forward_batch.forward_mode.is_idle():
            planned = maybe_plan_topk(runner.attn_backend, forward_batch, self.topk)
        if planned is not None:
            planned.mark_forward_metadata_ready()
        return runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (mark kwargs decided at init)
    # expect: SG106
    def _run_with_mark_kwargs(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        runner = self.mtp_model_runner(0)
        if not forward_batch.forward_mode.is_idle():
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(**self._mark_kwargs)
        return runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (mark re-stamped before the launch)
    # expect: SG106
    def _draft_extend_stamped(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        runner = self.mtp_model_runner(0)
        if forward_batch.forward_mode.is_idle():
            return runner.forward(forward_batch).logits_output
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        forward_batch.spec_info.num_tokens_per_req = self.speculative_num_draft_tokens
        stamp_planned(forward_batch)
        return runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (mark re-stamped before the launch)
    # expect: clean
    def _draft_extend_stamped_preserving(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        runner = self.mtp_model_runner(0)
        if forward_batch.forward_mode.is_idle():
            return runner.forward(forward_batch).logits_output
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        stamp_planned_preserving(forward_batch)
        return runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._forward_raw (per-head pad, plan, EagerRunner.execute)
    # expect: clean
    def _run_heads_pad_first(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        logits: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            runner = self.mtp_model_runner(step)
            head = MTPDraftRunner(runner, self.server_args)
            head.pad_for_dp(forward_batch)
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            out = head.execute_eager(forward_batch)
            if forward_batch.global_num_tokens_cpu is not None:
                forward_batch.post_forward_mlp_sync_batch(out)
            logits.append(out.next_token_logits[select_index])
        return logits


class DenseMTPHeadsWorker(MultiLayerMTPDraftWorker):
    """Dense-MLA heads (no DSA indexer): the eager re-plan is always safe."""

    def __init__(self, server_args: ServerArgs, draft_runner_list: Sequence[ModelRunner]):
        super().__init__(server_args, draft_runner_list)
        self._dense_mark_kwargs = {"replan_equivalent": True}

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (mark kwargs decided at init)
    # expect: clean
    def _run_dense_head(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        runner = self.mtp_model_runner(0)
        if not forward_batch.forward_mode.is_idle():
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(**self._dense_mark_kwargs)
        return runner.forward(forward_batch).logits_output
