"""Fork EAGLE v2 worker: verify preparation and a target-only decode step.

The fork's adaptive speculation can pause drafting for a step; the target
then runs a plain DECODE batch through ``TpModelWorker.forward_batch_generation``.
"""

from __future__ import annotations

from typing import Tuple

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleVerifyInput
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

from blindsg20.spec._builders import target_decode_batch


class ForkEAGLEWorkerV2(EAGLEWorkerV2):
    def _verify_forward_batch(
        self, batch: ScheduleBatch, verify_input: EagleVerifyInput
    ) -> Tuple[ForwardBatch, bool]:
        target_runner = self.target_worker.model_runner
        batch.spec_info = verify_input
        batch.forward_mode = (
            ForwardMode.IDLE
            if batch.forward_mode.is_idle()
            else ForwardMode.TARGET_VERIFY
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            target_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
            kv_loc_plan=verify_input.kv_loc_plan,
        )
        graph_runner = target_runner.decode_cuda_graph_runner
        can_run_graph = bool(graph_runner and graph_runner.can_run_graph(forward_batch))
        return forward_batch, can_run_graph

    # expect: clean
    def run_verify_forward(self, batch: ScheduleBatch, verify_input: EagleVerifyInput):
        forward_batch, can_run_graph = self._verify_forward_batch(batch, verify_input)
        if can_run_graph:
            # Replay metadata is loaded here (off the critical path); the
            # graph runner pads to its bucket itself.
            self.target_worker.model_runner.decode_cuda_graph_runner.load_batch(
                forward_batch
            )
            forward_batch.mark_forward_metadata_ready()
        # Eager verify stays unmarked: the forward plans after DP padding.
        return self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=forward_batch,
            is_verify=True,
        )

    # expect: SG106
    def target_only_decode(self, batch: ScheduleBatch):
        target_runner = self.target_worker.model_runner
        forward_batch = target_decode_batch(batch, target_runner)
        graph_runner = target_runner.decode_cuda_graph_runner
        preplan = not forward_batch.forward_mode.is_idle() and not (
            graph_runner and graph_runner.can_run_graph(forward_batch)
        )
        if preplan:
            # Plan while the previous step's sampling still owns the GPU.
            target_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=forward_batch,
            skip_attn_backend_init=preplan,
        )
