"""More draft-extend hooks: planning owned by mixins, bound planners,
constructor-resolved flags, backend-side records and the old forward kwargs.
"""

from __future__ import annotations

import functools
import logging
from typing import List, Optional, Tuple

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import require_mlp_sync

from blindsg42.attn.flashinfer_fork import (
    PlanRecordingFlashInferAttnBackend,
    PlanSharingFlashInferAttnBackend,
)
from blindsg42.common.plan_state import PrePlanMixin, PrePlanner
from blindsg42.spec.preplan import (
    build_draft_extend_forward_batch,
    draft_extend_select_index,
    finish_draft_extend,
)

logger = logging.getLogger(__name__)


def _graph_ok(worker: EagleDraftWorker, forward_batch: ForwardBatch) -> bool:
    runner = worker.cuda_graph_runner_for_draft_extend
    return bool(runner is not None and runner.can_run_graph(forward_batch))


class KwargsExtendDraftWorker(EagleDraftWorker):
    """Keeps the forward kwargs of the fork's 0.5.6-era draft extend."""

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        forward_batch = build_draft_extend_forward_batch(
            batch, self.draft_runner, batch_result, self.speculative_num_draft_tokens
        )
        can_run_cuda_graph = _graph_ok(self, forward_batch)
        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            fwd_kwargs = {}
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                fwd_kwargs["skip_attn_backend_init"] = True
            logits_output = self.draft_runner.forward(
                forward_batch, **fwd_kwargs
            ).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class KwargsDictExtendDraftWorker(EagleDraftWorker):
    """Same kwargs shape; the skip is only requested without MLP sync."""

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        forward_batch = build_draft_extend_forward_batch(
            batch, self.draft_runner, batch_result, self.speculative_num_draft_tokens
        )
        can_run_cuda_graph = _graph_ok(self, forward_batch)
        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            fwd_kwargs = {}
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                fwd_kwargs["skip_attn_backend_init"] = not require_mlp_sync()
            logits_output = self.draft_runner.forward(
                forward_batch, **fwd_kwargs
            ).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class MixinExtendDraftWorker(PrePlanMixin, EagleDraftWorker):
    """Planning owned by ``PrePlanMixin``."""

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        with self.plan_stream_ctx:
            forward_batch = build_draft_extend_forward_batch(
                batch,
                self.draft_runner,
                batch_result,
                self.speculative_num_draft_tokens,
            )
            can_run_cuda_graph = _graph_ok(self, forward_batch)
            if not can_run_cuda_graph:
                self._preplan_and_mark(forward_batch, self.draft_runner.attn_backend)
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class MixinPlannedExtendDraftWorker(PrePlanMixin, EagleDraftWorker):
    """Planning owned by ``PrePlanMixin``, opting into post-pad re-planning."""

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        with self.plan_stream_ctx:
            forward_batch = build_draft_extend_forward_batch(
                batch,
                self.draft_runner,
                batch_result,
                self.speculative_num_draft_tokens,
            )
            can_run_cuda_graph = _graph_ok(self, forward_batch)
            if not can_run_cuda_graph:
                # Same backend object as ModelRunner's own plan: equivalent.
                self._preplan_and_mark(
                    forward_batch,
                    self.draft_runner.attn_backend,
                    replan_equivalent=True,
                )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class BoundPlannerExtendDraftWorker(EagleDraftWorker):
    """Binds a ``PrePlanner`` to the draft-extend backend at init time."""

    def init_attention_backend(self):
        super().init_attention_backend()
        self._extend_planner = PrePlanner(self.draft_runner.attn_backend)

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        forward_batch = build_draft_extend_forward_batch(
            batch, self.draft_runner, batch_result, self.speculative_num_draft_tokens
        )
        can_run_cuda_graph = _graph_ok(self, forward_batch)
        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            forward_batch = self._extend_planner(forward_batch)
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class PolicyFlagExtendDraftWorker(EagleDraftWorker):
    """Replan policy resolved in the constructor (DSA-safe default)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # DSA indexers cannot rebuild schedule metadata on a padded batch
        # (upstream #27091): keep the pre-pad plan.
        self.allow_post_pad_replan = False

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        forward_batch = build_draft_extend_forward_batch(
            batch, self.draft_runner, batch_result, self.speculative_num_draft_tokens
        )
        can_run_cuda_graph = _graph_ok(self, forward_batch)
        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(
                    replan_equivalent=self.allow_post_pad_replan
                )
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class PolicyAttrExtendDraftWorker(EagleDraftWorker):
    """Replan policy resolved in the constructor; dense (non-DSA) drafts."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Dense FlashInfer drafts re-plan cheaply on the same backend.
        self.allow_post_pad_replan = True

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        forward_batch = build_draft_extend_forward_batch(
            batch, self.draft_runner, batch_result, self.speculative_num_draft_tokens
        )
        can_run_cuda_graph = _graph_ok(self, forward_batch)
        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(
                    replan_equivalent=self.allow_post_pad_replan
                )
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class MicroBatchExtendDraftWorker(EagleDraftWorker):
    """Runs the draft extend of both two-batch-overlap halves: all plans are
    issued first (plan stream), then all forwards (compute stream)."""

    # expect: SG106
    def run_extend_group(
        self,
        items: List[Tuple[ScheduleBatch, GenerationBatchResult]],
    ) -> None:
        staged = []
        with self.plan_stream_ctx:
            for batch, batch_result in items:
                select_index = draft_extend_select_index(
                    batch,
                    batch_result.accept_lens,
                    self.speculative_num_draft_tokens,
                    self.device,
                )
                forward_batch = build_draft_extend_forward_batch(
                    batch,
                    self.draft_runner,
                    batch_result,
                    self.speculative_num_draft_tokens,
                )
                if not forward_batch.forward_mode.is_idle():
                    self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                    forward_batch.mark_forward_metadata_ready()
                staged.append((forward_batch, batch, batch_result, select_index))
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        for forward_batch, batch, batch_result, select_index in staged:
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            finish_draft_extend(
                batch,
                batch_result,
                logits_output,
                select_index,
                topk=self.topk,
                ran_cuda_graph=False,
            )

    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        self.run_extend_group([(batch, batch_result)])


class ReinitExtendDraftWorker(EagleDraftWorker):
    """Pre-plans; asks the runner to re-init the backend when MLP sync pads."""

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        forward_batch = build_draft_extend_forward_batch(
            batch, self.draft_runner, batch_result, self.speculative_num_draft_tokens
        )
        can_run_cuda_graph = _graph_ok(self, forward_batch)
        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            logits_output = self.draft_runner.forward(
                forward_batch,
                reinit_attn_backend=forward_batch.global_num_tokens_cpu is not None,
            ).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class PartialRecordExtendDraftWorker(EagleDraftWorker):
    """Binds the record call with the replan opt-in through functools.partial."""

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        forward_batch = build_draft_extend_forward_batch(
            batch, self.draft_runner, batch_result, self.speculative_num_draft_tokens
        )
        can_run_cuda_graph = _graph_ok(self, forward_batch)
        record = functools.partial(
            forward_batch.mark_forward_metadata_ready, replan_equivalent=True
        )
        if can_run_cuda_graph:
            launch = functools.partial(
                self.cuda_graph_runner_for_draft_extend.execute,
                forward_batch,
                select_index,
            )
        else:
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                record()
            launch = functools.partial(self.draft_runner.forward, forward_batch)
        out = launch()
        logits_output = out if can_run_cuda_graph else out.logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class FinallyRestoreExtendDraftWorker(EagleDraftWorker):
    """try/finally restore of ScheduleBatch fields; the record is widened to
    replan-equivalent when MLP sync will pad the batch."""

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        forward_mode_backup = batch.forward_mode
        input_ids_backup = batch.input_ids
        spec_info_backup = batch.spec_info
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        try:
            forward_batch = build_draft_extend_forward_batch(
                batch,
                self.draft_runner,
                batch_result,
                self.speculative_num_draft_tokens,
            )
            can_run_cuda_graph = _graph_ok(self, forward_batch)
            if can_run_cuda_graph:
                logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                    forward_batch, select_index
                )
            else:
                if not forward_batch.forward_mode.is_idle():
                    self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                    forward_batch.mark_forward_metadata_ready()
                    if forward_batch.global_num_tokens_cpu is not None:
                        forward_batch.forward_metadata_replan_equivalent = True
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            finish_draft_extend(
                batch,
                batch_result,
                logits_output,
                select_index,
                topk=self.topk,
                ran_cuda_graph=can_run_cuda_graph,
            )
        finally:
            batch.forward_mode = forward_mode_backup
            batch.input_ids = input_ids_backup
            batch.spec_info = spec_info_backup


class RecordingBackendExtendDraftWorker(EagleDraftWorker):
    """Installs a draft-extend backend that records its own plans."""

    def init_attention_backend(self):
        super().init_attention_backend()
        self.draft_extend_attn_backend = PlanRecordingFlashInferAttnBackend(
            self.draft_runner, skip_prefill=False
        )
        self.draft_runner.attn_backend = self.draft_extend_attn_backend

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        forward_batch = build_draft_extend_forward_batch(
            batch, self.draft_runner, batch_result, self.speculative_num_draft_tokens
        )
        can_run_cuda_graph = _graph_ok(self, forward_batch)
        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            if not forward_batch.forward_mode.is_idle():
                with self.plan_stream_ctx:
                    self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
                if self.plan_stream:
                    torch.get_device_module(self.device).current_stream().wait_stream(
                        self.plan_stream
                    )
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class SharedBackendExtendDraftWorker(EagleDraftWorker):
    """Installs the replan-equivalent recording backend."""

    def init_attention_backend(self):
        super().init_attention_backend()
        self.draft_extend_attn_backend = PlanSharingFlashInferAttnBackend(
            self.draft_runner, skip_prefill=False
        )
        self.draft_runner.attn_backend = self.draft_extend_attn_backend

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        forward_batch = build_draft_extend_forward_batch(
            batch, self.draft_runner, batch_result, self.speculative_num_draft_tokens
        )
        can_run_cuda_graph = _graph_ok(self, forward_batch)
        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            if not forward_batch.forward_mode.is_idle():
                self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )


class TrtllmDraftExtendWorker(EagleDraftWorker):
    """MLA (DeepSeek MTP) draft worker pinned to the TRT-LLM MLA backend for
    draft extend. That backend re-plans a decode-family batch whose size grew
    past its plan (``forward_extend`` backstop), so the pre-pad plan can be
    recorded as-is."""

    def init_attention_backend(self):
        super().init_attention_backend()
        self.draft_extend_attn_backend = TRTLLMMLABackend(
            self.draft_runner, skip_prefill=False
        )
        self.draft_runner.attn_backend = self.draft_extend_attn_backend

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        assert isinstance(self.draft_runner.attn_backend, TRTLLMMLABackend)
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        forward_batch = build_draft_extend_forward_batch(
            batch, self.draft_runner, batch_result, self.speculative_num_draft_tokens
        )
        can_run_cuda_graph = _graph_ok(self, forward_batch)
        if can_run_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            if not forward_batch.forward_mode.is_idle():
                self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=can_run_cuda_graph,
        )
