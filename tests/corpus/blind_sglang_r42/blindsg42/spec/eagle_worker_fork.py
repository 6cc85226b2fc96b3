"""Target-verify side of the fork's EAGLE v2 worker."""

from __future__ import annotations

import logging
import time

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.speculative.eagle_info import EagleVerifyInput
from sglang.srt.speculative.eagle_utils import eagle_prepare_for_verify
from sglang.srt.speculative.eagle_worker_common import run_eagle_verify
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

logger = logging.getLogger(__name__)


class SharedRegimeVerifyWorker(EAGLEWorkerV2):
    """Uses the multi-layer worker's verify regime (metadata marked pre-pad)
    for the single-layer worker as well, to share one code path."""

    verify_time_ms: float = 0.0

    # expect: clean
    def verify(self, batch: ScheduleBatch, pp_proxy_tensors=None, grammar_barrier=None):
        tic = time.perf_counter()
        result = run_eagle_verify(
            batch,
            pp_proxy_tensors=pp_proxy_tensors,
            target_worker=self.target_worker,
            req_to_token_pool=self.req_to_token_pool,
            token_to_kv_pool_allocator=self.token_to_kv_pool_allocator,
            plan_stream=self.plan_stream,
            plan_stream_ctx=self.plan_stream_ctx,
            topk=self.topk,
            num_draft_tokens=self.speculative_num_draft_tokens,
            device=self.device,
            metadata_ready_pre_pad=True,
            finalize_tree_path=True,
            grammar_barrier=grammar_barrier,
        )
        self.verify_time_ms = (time.perf_counter() - tic) * 1e3
        return result


class AcceptanceProbeWorker(EAGLEWorkerV2):
    """Runs the target-verify forward alone for the fork's acceptance probe
    (logits only, no acceptance bookkeeping)."""

    # expect: clean
    def verify_logits(self, batch: ScheduleBatch):
        verify_input: EagleVerifyInput = batch.spec_info
        if self.plan_stream:
            self.plan_stream.wait_stream(
                torch.get_device_module(self.device).current_stream()
            )
        with self.plan_stream_ctx:
            verify_forward_batch, can_run_cuda_graph = eagle_prepare_for_verify(
                verify_input,
                self.req_to_token_pool,
                batch,
                self.target_worker,
            )
            if (
                not can_run_cuda_graph
                and not verify_forward_batch.forward_mode.is_idle()
            ):
                # Warm plan on the plan stream. The eager TARGET_VERIFY
                # forward plans the final (post-pad) batch regardless.
                self.target_worker.model_runner.attn_backend.init_forward_metadata(
                    verify_forward_batch
                )
                verify_forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        output = self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
        )
        return output.logits_output, can_run_cuda_graph
