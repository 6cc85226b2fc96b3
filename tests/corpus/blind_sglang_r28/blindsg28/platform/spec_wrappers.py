"""Speculative-decoding wrappers the platform team puts around SGLang's
draft / target workers (EAGLE, multi-layer EAGLE, frozen-KV MTP)."""

from __future__ import annotations

import logging
from typing import Any, List, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.frozen_kv_mtp_utils import (
    frozen_kv_target_view,
    target_kv_pool_view,
)

from blindsg28.platform import planning

logger = logging.getLogger(__name__)


class ForkDraftPipeline:
    def __init__(
        self,
        target_worker: TpModelWorker,
        draft_worker: TpModelWorker,
        draft_attn_backend: Any,
        draft_runner_list: Optional[List[ModelRunner]] = None,
        kv_context: Optional[Any] = None,
    ):
        self.target_worker = target_worker
        self.draft_worker = draft_worker
        self.draft_runner: ModelRunner = draft_worker.model_runner
        self.draft_attn_backend = draft_attn_backend
        self.draft_runner_list = draft_runner_list or [self.draft_runner]
        self.kv_context = kv_context
        # DSA's indexer cannot rebuild its deep_gemm schedule on a DP-padded
        # batch, so draft pre-plans never opt into the post-pad re-plan.
        self._replan_ok = False

    def _draft_extend_batch(self, batch: ScheduleBatch) -> ForwardBatch:
        batch.forward_mode = (
            ForwardMode.IDLE
            if batch.forward_mode.is_idle()
            else ForwardMode.DRAFT_EXTEND_V2
        )
        return ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )

    # idiom: frozen_kv_mtp_worker_v2.FrozenKVMTPDraftWorker._init_frozen_kv_metadata + draft_forward, twist: plan inside the frozen target view, mark, then the draft runner's (padding) forward
    # expect: SG106
    def frozen_seed_forward(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle() or planning.graph_can_run(
            self.draft_runner, forward_batch
        ):
            return self.draft_runner.forward(forward_batch).logits_output
        with frozen_kv_target_view(
            forward_batch, self.kv_context, self.draft_attn_backend
        ):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        with (
            target_kv_pool_view(forward_batch, self.kv_context, self.draft_attn_backend),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            return self.draft_runner.forward(forward_batch).logits_output

    # idiom: frozen_kv_mtp_worker_v2.FrozenKVMTPDraftWorker._init_frozen_kv_metadata, twist: DP padding runs first, the view plan covers the padded batch, then the eager runner
    # expect: clean
    def frozen_seed_forward_post_pad(self, forward_batch: ForwardBatch):
        planning.pad_for_dp(forward_batch, self.draft_runner)
        if not forward_batch.forward_mode.is_idle():
            with frozen_kv_target_view(
                forward_batch, self.kv_context, self.draft_attn_backend
            ):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        with (
            target_kv_pool_view(forward_batch, self.kv_context, self.draft_attn_backend),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            return planning.run_eager(self.draft_runner, forward_batch)

    # idiom: multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker._draft_extend_for_decode, twist: the fork marks each step's pre-plan before the step runner's forward
    # expect: SG106
    def multi_layer_draft_extend(self, forward_batch: ForwardBatch):
        outputs = []
        for step, runner in enumerate(self.draft_runner_list):
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            outputs.append(runner.forward(forward_batch).logits_output)
        return outputs

    # idiom: multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker._draft_extend_for_decode, twist: each step's pre-plan is left unmarked, as upstream does
    # expect: clean
    def multi_layer_draft_extend_unmarked(self, forward_batch: ForwardBatch):
        outputs = []
        for step, runner in enumerate(self.draft_runner_list):
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
            outputs.append(runner.forward(forward_batch).logits_output)
        return outputs

    # idiom: eagle_worker.EAGLEWorker.forward_draft_extend_after_decode (0.5.6 form), twist: kept the deprecated skip_attn_backend_init=True call against the 0.5.23 runner
    # expect: SG106
    def draft_extend_after_decode(self, batch: ScheduleBatch):
        forward_batch = self._draft_extend_batch(batch)
        if forward_batch.seq_lens_cpu is not None:
            forward_batch.seq_lens_sum = forward_batch.seq_lens_cpu.sum().item()
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        out = self.draft_runner.forward(forward_batch, skip_attn_backend_init=True)
        return out.logits_output

    # idiom: tp_worker.TpModelWorker.forward_batch_generation(skip_attn_backend_init=...), twist: the flag travels in a kwargs dict filled only when the plan ran
    # expect: SG106
    def draft_extend_via_worker(self, batch: ScheduleBatch):
        forward_batch = self._draft_extend_batch(batch)
        fwd_kwargs = {"is_verify": False}
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            fwd_kwargs["skip_attn_backend_init"] = True
        return self.draft_worker.forward_batch_generation(
            None, forward_batch, **fwd_kwargs
        )

    # idiom: eagle_worker_common.prepare_for_draft_extend ("do NOT opt into post-pad re-plan"), twist: replan_equivalent read from an attribute set in __init__
    # expect: SG106
    def draft_with_config_flag(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_draft_extend_v2():
            return self.draft_runner.forward(forward_batch)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=self._replan_ok)
        return self.draft_runner.forward(forward_batch)

    # idiom: eagle_worker_common.prepare_for_draft_extend, twist: plan+mark inside the planning.preplanned context manager from another module
    # expect: SG106
    def draft_in_preplanned_ctx(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_draft_extend_v2():
            return self.draft_runner.forward(forward_batch)
        with planning.preplanned(self.draft_runner.attn_backend, forward_batch) as planned:
            out = self.draft_runner.forward(forward_batch)
        logger.info("draft extend planned ahead: %s", planned)
        return out

    # idiom: eagle_worker_common.prepare_for_draft_extend, twist: planning.preplanned context manager called with replan_equivalent=True on the runner's own backend
    # expect: clean
    def draft_in_replannable_ctx(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_draft_extend_v2():
            return self.draft_runner.forward(forward_batch)
        with planning.preplanned(
            self.draft_runner.attn_backend, forward_batch, replan_equivalent=True
        ) as planned:
            out = self.draft_runner.forward(forward_batch)
        logger.info("draft extend planned ahead: %s", planned)
        return out

    # idiom: eager_runner.EagerRunner._execute_extend (target verify is re-planned from the final batch every time), twist: the fork pre-plans and marks an eager verify batch anyway
    # expect: clean
    def verify_eager(self, forward_batch: ForwardBatch):
        target_runner = self.target_worker.model_runner
        if (
            forward_batch.forward_mode.is_target_verify()
            and not planning.graph_can_run(target_runner, forward_batch)
        ):
            target_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.target_worker.forward_batch_generation(
            None, forward_batch, is_verify=True
        )

    # idiom: eagle_utils.eagle_prepare_for_verify + eagle_worker_common.run_eagle_verify, twist: load_batch+mark on a plan stream for the graph case only
    # expect: clean
    def prepare_verify_plan_stream(self, forward_batch: ForwardBatch, plan_stream=None):
        target_runner = self.target_worker.model_runner
        can_graph = planning.graph_can_run(target_runner, forward_batch)
        if can_graph:
            stream_ctx = (
                torch.cuda.stream(plan_stream) if plan_stream is not None else None
            )
            if stream_ctx is not None:
                with stream_ctx:
                    target_runner.decode_cuda_graph_runner.load_batch(forward_batch)
                torch.cuda.current_stream().wait_stream(plan_stream)
            else:
                target_runner.decode_cuda_graph_runner.load_batch(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.target_worker.forward_batch_generation(
            None, forward_batch, is_verify=True
        )
