"""Plan-stream pipelining for the draft worker: plan on a side stream while
the main stream finishes the previous forward."""

from __future__ import annotations

import torch

from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.spec_utils import get_plan_stream


class PlanStreamPipeline:
    def __init__(self, worker: TpModelWorker, device: str):
        self.worker = worker
        self.runner: ModelRunner = worker.model_runner
        self.plan_stream, self.plan_stream_ctx = get_plan_stream(device)

    def _fork_plan_stream(self):
        if self.plan_stream is not None:
            self.plan_stream.wait_stream(torch.cuda.current_stream())

    def _join_plan_stream(self):
        if self.plan_stream is not None:
            torch.cuda.current_stream().wait_stream(self.plan_stream)

    def _plan_on_side_stream(self, forward_batch: ForwardBatch) -> None:
        self._fork_plan_stream()
        with self.plan_stream_ctx:
            if not forward_batch.forward_mode.is_idle():
                self.runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        self._join_plan_stream()

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (plan_stream_ctx) -> TpModelWorker.forward_batch_generation
    # expect: SG106
    def run_draft_extend(self, forward_batch: ForwardBatch):
        self._plan_on_side_stream(forward_batch)
        result = self.worker.forward_batch_generation(None, forward_batch=forward_batch)
        return result.logits_output

    # idiom: speculative/eagle_worker_v2.py plan_stream pre-plan + model_runner.py ModelRunner._forward_raw (re-plan after padding)
    # expect: clean
    def run_draft_extend_replanned(self, forward_batch: ForwardBatch):
        self._plan_on_side_stream(forward_batch)
        runner = self.runner
        synced = forward_batch.global_num_tokens_cpu is not None
        # Pad now, as the eager forward would, and re-plan the padded batch.
        runner._prepare_eager_forward_batch(forward_batch)
        if synced and not forward_batch.forward_mode.is_idle():
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = runner.eager_runner.execute(forward_batch)
        if synced:
            forward_batch.post_forward_mlp_sync_batch(logits_output)
        return logits_output
