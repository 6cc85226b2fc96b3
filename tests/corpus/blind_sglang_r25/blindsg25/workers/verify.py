"""Target-verify entry points of the fork's EAGLE v2 worker."""

from __future__ import annotations

import logging

from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs_uniform_func
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle_info import EagleVerifyInput
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

logger = logging.getLogger(__name__)


class ForkEAGLEWorkerV2(EAGLEWorkerV2):
    def _verify_forward_batch(self, batch: ScheduleBatch) -> ForwardBatch:
        verify_input: EagleVerifyInput = batch.spec_info
        if not batch.forward_mode.is_idle():
            batch.input_ids = verify_input.draft_token
            batch.out_cache_loc = assign_extend_cache_locs_uniform_func(
                req_pool_indices=batch.req_pool_indices,
                req_to_token=self.req_to_token_pool.req_to_token,
                start_offset=batch.seq_lens,
                batch_size=len(batch.req_pool_indices),
                draft_token_num=verify_input.draft_token_num,
                device=batch.device,
            )
        batch.forward_mode = (
            ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.TARGET_VERIFY
        )
        return ForwardBatch.init_new(
            batch,
            self.target_worker.model_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
            kv_loc_plan=verify_input.kv_loc_plan,
        )

    def _verify_forward_dflash_style(self, batch: ScheduleBatch):
        # idiom: speculative/dflash_worker_v2.py DFlashWorkerV2 verify (skip_attn_backend_init only without DP attention)
        # expect: clean
        model_runner = self.target_worker.model_runner
        verify_forward_batch = self._verify_forward_batch(batch)
        dp_attention = get_parallel().attn_dp_enabled
        graph_runner = model_runner.decode_cuda_graph_runner
        if dp_attention:
            # DP padding can change the live rows and graph eligibility;
            # ModelRunner owns planning after final batch preparation.
            pass
        elif graph_runner and graph_runner.can_run_graph(verify_forward_batch):
            graph_runner.load_batch(verify_forward_batch)
        elif not batch.forward_mode.is_idle():
            model_runner.attn_backend.init_forward_metadata(verify_forward_batch)
        return self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
            skip_attn_backend_init=None if dp_attention else True,
        )

    def _verify_graph_only_mark(self, batch: ScheduleBatch):
        # idiom: speculative/eagle_utils.py eagle_prepare_for_verify (mark only after cuda-graph load_batch)
        # expect: clean
        model_runner = self.target_worker.model_runner
        verify_forward_batch = self._verify_forward_batch(batch)
        graph_runner = model_runner.decode_cuda_graph_runner
        can_run_cuda_graph = bool(
            graph_runner and graph_runner.can_run_graph(verify_forward_batch)
        )
        if can_run_cuda_graph:
            graph_runner.load_batch(verify_forward_batch)
            verify_forward_batch.mark_forward_metadata_ready()
        # Non-graph: forward_extend plans after prepare_mlp_sync_batch pads.
        return self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
        )

    def _verify_marked_pre_pad(self, batch: ScheduleBatch):
        # idiom: speculative/eagle_worker_common.py run_eagle_verify (metadata_ready_pre_pad=True, multi-layer)
        # expect: clean
        model_runner = self.target_worker.model_runner
        with self.plan_stream_ctx:
            verify_forward_batch = self._verify_forward_batch(batch)
            graph_runner = model_runner.decode_cuda_graph_runner
            if graph_runner and graph_runner.can_run_graph(verify_forward_batch):
                graph_runner.load_batch(verify_forward_batch)
        # Multi-layer preserved behaviour: marked pre-pad unconditionally.
        # EagerRunner._execute_extend (and the prefill graph replay) re-plan
        # TARGET_VERIFY from the final, padded batch regardless of the mark.
        verify_forward_batch.mark_forward_metadata_ready()
        return self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
        )
