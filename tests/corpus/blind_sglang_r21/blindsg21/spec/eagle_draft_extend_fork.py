"""Eager draft-extend policies for the fork's EAGLE v2 draft worker.

All workers here share ``_EagerDraftExtendBase._draft_extend_for_decode``
(called by ``EAGLEWorkerV2`` after verify); they differ only in how the eager
(non-graph) draft-extend forward gets its attention metadata.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import require_mlp_sync

from blindsg21.common import flags
from blindsg21.common.plan_guard import preplanned
from blindsg21.spec.draft_extend_helpers import build_draft_extend_forward_batch
from blindsg21.spec.eagle_draft_fork import _DraftTailMixin


class _EagerDraftExtendBase(_DraftTailMixin, EagleDraftWorker):
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        extend_input, select_index, next_token_ids = self._draft_extend_input(
            batch_result
        )
        forward_batch = build_draft_extend_forward_batch(
            batch,
            extend_input,
            next_token_ids,
            self.speculative_num_draft_tokens,
            self.draft_runner,
            kv_loc_plan=kv_loc_plan,
        )
        graph_runner = self.cuda_graph_runner_for_draft_extend
        if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
            logits_output = graph_runner.execute(forward_batch, select_index)
        else:
            logits_output = self._draft_extend_eager(forward_batch)
            logits_output.next_token_logits = logits_output.next_token_logits[
                select_index
            ]
            if logits_output.hidden_states is not None:
                logits_output.hidden_states = logits_output.hidden_states[
                    select_index
                ]
        self._publish_next_draft_input(batch_result, logits_output)

    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        return self.draft_runner.forward(forward_batch).logits_output

    def _run_eager_runner(self, forward_batch: ForwardBatch):
        """Run the runner's eager path directly (no MLP-sync pass of its own)."""
        runner = self.draft_runner
        with forward_context(
            ForwardContext(attn_backend=runner.attn_backend),
            forward_batch=forward_batch,
        ):
            return runner.eager_runner.execute(forward_batch)


class KwargsEagleDraftWorker(_EagerDraftExtendBase):
    def __init__(self, server_args: ServerArgs, gpu_id: int, nccl_port: int, target_worker):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        # The draft-extend batch is planned by this worker on its plan stream.
        self._draft_extend_forward_kwargs = {"skip_attn_backend_init": True}

    # expect: SG106
    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        with self.plan_stream_ctx:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        return self.draft_runner.forward(
            forward_batch, **self._draft_extend_forward_kwargs
        ).logits_output


class WarmPlanDraftWorker(_EagerDraftExtendBase):
    def __init__(self, server_args: ServerArgs, gpu_id: int, nccl_port: int, target_worker):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        self._draft_extend_forward_kwargs = {"reinit_attn_backend": False}

    # expect: clean
    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        # Plan once on the side stream to warm the wrapper's plan cache; the
        # batch stays unmarked so the runner plans the shape it actually runs.
        with self.plan_stream_ctx:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        return self.draft_runner.forward(
            forward_batch, **self._draft_extend_forward_kwargs
        ).logits_output


class ContextPlannedDraftWorker(_EagerDraftExtendBase):
    # expect: SG106
    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        with preplanned(self.draft_runner.attn_backend, forward_batch) as fb:
            return self.draft_runner.forward(fb).logits_output


class ReplannableContextDraftWorker(_EagerDraftExtendBase):
    # expect: clean
    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        with preplanned(
            self.draft_runner.attn_backend, forward_batch, replan_equivalent=True
        ) as fb:
            return self.draft_runner.forward(fb).logits_output


class PropertyGatedDraftWorker(_EagerDraftExtendBase):
    @property
    def _preplan_eager_draft_extend(self) -> bool:
        # No draft-extend graph: every round is eager, so plan ahead.
        return self.cuda_graph_runner_for_draft_extend is None

    # expect: SG106
    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        if self._preplan_eager_draft_extend and not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output


class DpAwarePropertyDraftWorker(_EagerDraftExtendBase):
    @property
    def _preplan_eager_draft_extend(self) -> bool:
        # DP attention pads inside ModelRunner.forward; a plan made here would
        # describe the unpadded batch.
        return self.cuda_graph_runner_for_draft_extend is None and not require_mlp_sync()

    # expect: clean
    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        if self._preplan_eager_draft_extend and not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output


class EnvPreplanDraftWorker(_EagerDraftExtendBase):
    # expect: SG106
    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        if flags.PREPLAN_DRAFT_EXTEND and not forward_batch.forward_mode.is_idle():
            with self.plan_stream_ctx:
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output


class EnvReplanDraftWorker(_EagerDraftExtendBase):
    # expect: clean
    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            if flags.DRAFT_EXTEND_REPLAN_ON_PAD:
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            # else: unmarked, the runner plans again after padding.
        return self.draft_runner.forward(forward_batch).logits_output


class ClosureDraftWorker(_EagerDraftExtendBase):
    # expect: SG106
    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        runner = self.draft_runner
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

        def _run_once():
            return runner.forward(forward_batch).logits_output

        out = _run_once()
        if out.next_token_logits is None:
            # Logits were pruned by a stale select_index; run once more.
            forward_batch.spec_info.select_index = None
            out = _run_once()
        return out


class ReplanFieldDraftWorker(_EagerDraftExtendBase):
    # expect: clean
    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        runner = self.draft_runner
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        # Same backend object as the runner's: opt into the post-pad re-plan.
        forward_batch.forward_metadata_replan_equivalent = True

        def _run_once():
            return runner.forward(forward_batch).logits_output

        return _run_once()


class IdleAwareDraftWorker(_EagerDraftExtendBase):
    # expect: SG106
    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            # Nothing to plan; still enter the forward for the DP collectives.
            return self.draft_runner.forward(forward_batch).logits_output
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output


class IdleAwareReplanDraftWorker(_EagerDraftExtendBase):
    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.draft_runner.forward(forward_batch).logits_output


class ExplicitPadDraftWorker(_EagerDraftExtendBase):
    """Runs the MLP-sync padding itself so it can time it separately."""

    # expect: SG106
    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        runner = self.draft_runner
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        padded = forward_batch.global_num_tokens_cpu is not None
        if padded:
            forward_batch.prepare_mlp_sync_batch(runner)
        out = self._run_eager_runner(forward_batch)
        if padded:
            forward_batch.post_forward_mlp_sync_batch(out)
        return out


class LateMarkDraftWorker(_EagerDraftExtendBase):
    # expect: SG106
    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        runner = self.draft_runner
        runner.attn_backend.init_forward_metadata(forward_batch)
        padded = forward_batch.global_num_tokens_cpu is not None
        if padded:
            forward_batch.prepare_mlp_sync_batch(runner)
        # Mark after padding so the recorded shapes are the final ones.
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        out = self._run_eager_runner(forward_batch)
        if padded:
            forward_batch.post_forward_mlp_sync_batch(out)
        return out


class ReplanAfterPadDraftWorker(_EagerDraftExtendBase):
    # expect: clean
    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        runner = self.draft_runner
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        padded = forward_batch.global_num_tokens_cpu is not None
        if padded:
            forward_batch.prepare_mlp_sync_batch(runner)
            # The padding added requests: plan again for what will run.
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        out = self._run_eager_runner(forward_batch)
        if padded:
            forward_batch.post_forward_mlp_sync_batch(out)
        return out


class UnmarkAfterPadDraftWorker(_EagerDraftExtendBase):
    # expect: clean
    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        runner = self.draft_runner
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        planned_bs = forward_batch.forward_metadata_planned_bs
        padded = forward_batch.global_num_tokens_cpu is not None
        if padded:
            forward_batch.prepare_mlp_sync_batch(runner)
        if forward_batch.batch_size != planned_bs:
            forward_batch.forward_metadata_ready = False
        out = self._run_eager_runner(forward_batch)
        if padded:
            forward_batch.post_forward_mlp_sync_batch(out)
        return out


class EquivalentDraftExtendWorker(_EagerDraftExtendBase):
    # expect: clean
    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.draft_runner.forward(forward_batch).logits_output


class DeferredDraftExtendWorker(_EagerDraftExtendBase):
    def _draft_extend_eager(self, forward_batch: ForwardBatch):
        # Planning happens in ModelRunner.forward, after the DP padding.
        assert forward_batch.needs_forward_metadata_init()
        return self.draft_runner.forward(forward_batch).logits_output


class GraphFirstDraftExtendWorker(_EagerDraftExtendBase):
    """Plans on the plan stream while the target sampler runs; the draft-extend
    graph replays its own captured metadata, so the pre-plan only matters if
    the graph cannot take the batch."""

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        extend_input, select_index, next_token_ids = self._draft_extend_input(
            batch_result
        )
        forward_batch = build_draft_extend_forward_batch(
            batch,
            extend_input,
            next_token_ids,
            self.speculative_num_draft_tokens,
            self.draft_runner,
            kv_loc_plan=kv_loc_plan,
        )
        with self.plan_stream_ctx:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        graph_runner = self.cuda_graph_runner_for_draft_extend
        if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
            logits_output = graph_runner.execute(forward_batch, select_index)
        else:
            if forward_batch.global_num_tokens_cpu is not None:
                forward_batch.forward_metadata_replan_equivalent = True
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            logits_output.next_token_logits = logits_output.next_token_logits[
                select_index
            ]
        self._publish_next_draft_input(batch_result, logits_output)
