"""Target-verify entry points of the fork's EAGLE v2 and NGRAM workers."""

from __future__ import annotations

import logging

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleVerifyInput
from sglang.srt.speculative.eagle_utils import eagle_prepare_for_verify
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.srt.speculative.ngram_worker import NGRAMWorker

logger = logging.getLogger(__name__)


class SyncVerifyEAGLEWorkerV2(EAGLEWorkerV2):
    """Verify without the plan stream (simpler to profile)."""

    # expect: clean
    def verify_sync(self, batch: ScheduleBatch):
        verify_input: EagleVerifyInput = batch.spec_info
        verify_forward_batch, can_run_cuda_graph = eagle_prepare_for_verify(
            verify_input,
            self.req_to_token_pool,
            batch,
            self.target_worker,
        )
        result = self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
        )
        return result.logits_output, can_run_cuda_graph

    # expect: SG106
    def verify_sync_preplanned(self, batch: ScheduleBatch):
        """Plans the eager verify up front so its host work overlaps."""
        verify_input: EagleVerifyInput = batch.spec_info
        verify_forward_batch, can_run_cuda_graph = eagle_prepare_for_verify(
            verify_input,
            self.req_to_token_pool,
            batch,
            self.target_worker,
        )
        if not can_run_cuda_graph and not batch.forward_mode.is_idle():
            self.target_worker.model_runner.attn_backend.init_forward_metadata(
                verify_forward_batch
            )
            verify_forward_batch.mark_forward_metadata_ready()
        result = self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
        )
        return result.logits_output, can_run_cuda_graph

    # expect: clean
    def verify_graph_preloaded(self, batch: ScheduleBatch):
        """Inline form of eagle_prepare_for_verify: the graph path is loaded
        (planned into the graph's static buffers) and marked; the eager path is
        left unplanned for the forward to init after padding."""
        model_runner = self.target_worker.model_runner
        batch.forward_mode = (
            ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.TARGET_VERIFY
        )
        verify_forward_batch = ForwardBatch.init_new(
            batch,
            model_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )
        graph_runner = model_runner.decode_cuda_graph_runner
        can_run_cuda_graph = bool(
            graph_runner and graph_runner.can_run_graph(verify_forward_batch)
        )
        if can_run_cuda_graph:
            graph_runner.load_batch(verify_forward_batch)
            verify_forward_batch.mark_forward_metadata_ready()
        out = model_runner.forward(verify_forward_batch)
        return out.logits_output, can_run_cuda_graph


class PlainNGRAMWorker(NGRAMWorker):
    # expect: clean
    def verify_only(self, batch: ScheduleBatch):
        """Target verify for ngram drafts; planning is left to the forward."""
        self._prepare_for_speculative_decoding(batch)
        if not batch.forward_mode.is_target_verify():
            return self.target_worker.forward_batch_generation(batch)
        forward_batch = ForwardBatch.init_new(batch, self.target_worker.model_runner)
        result = self.target_worker.forward_batch_generation(
            None, forward_batch=forward_batch, is_verify=True
        )
        accept = torch.ones(len(batch.reqs), dtype=torch.int32, device=self.device)
        return result, accept
