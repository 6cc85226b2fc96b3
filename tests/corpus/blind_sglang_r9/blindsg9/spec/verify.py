"""Target-verify paths of the fork's spec workers (EAGLE v2, NGRAM, DFlash).

The fork overlaps the verify plan with the draft tail, so the verify batch is
planned on the plan stream and handed to the target worker already planned.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle_utils import eagle_prepare_for_verify, eagle_sample
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.srt.speculative.ngram_worker import NGRAMWorker

logger = logging.getLogger(__name__)


def _wait_plan_stream(plan_stream, device) -> None:
    if plan_stream is not None:
        torch.get_device_module(device).current_stream().wait_stream(plan_stream)


class ForkEAGLEWorkerV2(EAGLEWorkerV2):
    # expect: clean
    def verify(self, batch: ScheduleBatch, pp_proxy_tensors=None, grammar_barrier=None):
        verify_input = batch.spec_info
        target_runner = self.target_worker.model_runner
        with self.plan_stream_ctx:
            verify_fb, can_run_cuda_graph = eagle_prepare_for_verify(
                verify_input,
                self.req_to_token_pool,
                batch,
                self.target_worker,
            )
            if not can_run_cuda_graph and not verify_fb.forward_mode.is_idle():
                # Overlap the eager verify plan with the draft tail as well.
                target_runner.attn_backend.init_forward_metadata(verify_fb)
                verify_fb.mark_forward_metadata_ready()
        _wait_plan_stream(self.plan_stream, self.device)

        result = self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_fb,
            is_verify=True,
            pp_proxy_tensors=pp_proxy_tensors,
        )
        predict, accept_lens, accept_index = eagle_sample(
            verify_input, batch, result.logits_output, None
        )
        result.accept_lens = accept_lens
        return result


class DPSafeEAGLEWorkerV2(EAGLEWorkerV2):
    # expect: clean
    def verify(self, batch: ScheduleBatch, pp_proxy_tensors=None, grammar_barrier=None):
        verify_input = batch.spec_info
        with self.plan_stream_ctx:
            # eagle_prepare_for_verify only pre-plans (load_batch + mark) on
            # the cuda-graph path; eager verify is planned post-pad by the
            # runner's forward_extend.
            verify_fb, can_run_cuda_graph = eagle_prepare_for_verify(
                verify_input,
                self.req_to_token_pool,
                batch,
                self.target_worker,
            )
        _wait_plan_stream(self.plan_stream, self.device)

        result = self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_fb,
            is_verify=True,
            pp_proxy_tensors=pp_proxy_tensors,
        )
        predict, accept_lens, accept_index = eagle_sample(
            verify_input, batch, result.logits_output, None
        )
        result.accept_lens = accept_lens
        return result


def _build_verify_batch(target_worker: TpModelWorker, batch: ScheduleBatch) -> ForwardBatch:
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.TARGET_VERIFY
    )
    return ForwardBatch.init_new(
        batch,
        target_worker.model_runner,
        capture_hidden_mode=CaptureHiddenMode.NULL,
        return_hidden_states_before_norm=False,
    )


class DPSafeNGRAMWorker(NGRAMWorker):
    # expect: clean
    def _forward_verify_preplanned(
        self, batch: ScheduleBatch, pp_proxy_tensors=None
    ) -> GenerationBatchResult:
        self._prepare_for_speculative_decoding(batch)
        verify_fb = _build_verify_batch(self.target_worker, batch)
        preplan = (
            not verify_fb.forward_mode.is_idle()
            and get_parallel().attn_dp_size == 1
        )
        if preplan:
            self.model_runner.attn_backend.init_forward_metadata(verify_fb)
            verify_fb.mark_forward_metadata_ready()
        return self.target_worker.forward_batch_generation(
            None,
            forward_batch=verify_fb,
            pp_proxy_tensors=pp_proxy_tensors,
            is_verify=True,
        )


# expect: SG106
def run_planned_on_stream(
    target_worker: TpModelWorker,
    forward_batch: ForwardBatch,
    plan_stream: Optional[torch.cuda.Stream],
    pp_proxy_tensors=None,
) -> GenerationBatchResult:
    """Plan a (draft-extend / decode / verify) batch on a side stream, then
    run it on the main one."""
    ctx = (
        torch.cuda.stream(plan_stream)
        if plan_stream is not None
        else contextlib.nullcontext()
    )
    with ctx:
        target_worker.model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    if plan_stream is not None:
        torch.cuda.current_stream().wait_stream(plan_stream)
    return target_worker.forward_batch_generation(
        batch=None,
        forward_batch=forward_batch,
        is_verify=forward_batch.forward_mode.is_target_verify(),
        pp_proxy_tensors=pp_proxy_tensors,
    )


# expect: clean
def run_planned_on_stream_reset(
    target_worker: TpModelWorker,
    forward_batch: ForwardBatch,
    plan_stream: Optional[torch.cuda.Stream],
    pp_proxy_tensors=None,
) -> GenerationBatchResult:
    """As above, but a DP-synced batch drops the pre-plan mark so the runner
    plans again after prepare_mlp_sync_batch pads it."""
    ctx = (
        torch.cuda.stream(plan_stream)
        if plan_stream is not None
        else contextlib.nullcontext()
    )
    with ctx:
        target_worker.model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    if plan_stream is not None:
        torch.cuda.current_stream().wait_stream(plan_stream)
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.forward_metadata_ready = False
    return target_worker.forward_batch_generation(
        batch=None,
        forward_batch=forward_batch,
        is_verify=forward_batch.forward_mode.is_target_verify(),
        pp_proxy_tensors=pp_proxy_tensors,
    )
