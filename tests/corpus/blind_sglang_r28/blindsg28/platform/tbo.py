"""Fork-level two-batch overlap: the scheduler hands over two (or more)
micro-batches per step and the executor interleaves their launches."""

from __future__ import annotations

from typing import List, Sequence

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg28.platform.planning import graph_can_run


class TwoBatchOverlapExecutor:
    def __init__(self, model_runner: ModelRunner):
        self.model_runner = model_runner
        self.micro_batches_run = 0

    # idiom: multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker._draft_extend_for_decode loop, twist: loop over TBO micro-batches (graph-ineligible), each planned and marked before its forward
    # expect: SG106
    def run_micro_batches(self, micro_batches: Sequence[ForwardBatch]) -> List:
        outputs = []
        backend = self.model_runner.attn_backend
        for mb in micro_batches:
            if mb.forward_mode.is_idle() or graph_can_run(self.model_runner, mb):
                outputs.append(self.model_runner.forward(mb))
                continue
            backend.init_forward_metadata(mb)
            mb.mark_forward_metadata_ready()
            outputs.append(self.model_runner.forward(mb))
            self.micro_batches_run += 1
        return outputs

    # idiom: forward_batch_info.ForwardBatch.prepare_mlp_sync_batch + eager_runner.EagerRunner.execute, twist: each micro-batch is planned, marked, then padded explicitly
    # expect: SG106
    def run_micro_batches_eager(self, micro_batches: Sequence[ForwardBatch]) -> List:
        outputs = []
        runner = self.model_runner
        for mb in micro_batches:
            if not mb.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(mb)
                mb.mark_forward_metadata_ready()
            mb.prepare_mlp_sync_batch(runner)
            out = runner.eager_runner.execute(mb)
            mb.post_forward_mlp_sync_batch(out)
            outputs.append(out)
            self.micro_batches_run += 1
        return outputs

    # idiom: forward_batch_info.ForwardBatch.prepare_mlp_sync_batch + eager_runner.EagerRunner.execute, twist: each micro-batch is padded first and planned on its padded shape
    # expect: clean
    def run_micro_batches_post_pad(self, micro_batches: Sequence[ForwardBatch]) -> List:
        outputs = []
        runner = self.model_runner
        for mb in micro_batches:
            mb.prepare_mlp_sync_batch(runner)
            if not mb.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(mb)
                mb.mark_forward_metadata_ready()
            out = runner.eager_runner.execute(mb)
            mb.post_forward_mlp_sync_batch(out)
            outputs.append(out)
            self.micro_batches_run += 1
        return outputs

    # idiom: forward_batch_info.ForwardBatch.mark_forward_metadata_ready(replan_equivalent=True), twist: per-micro-batch pre-plans that let the forward re-plan once padding reshapes them
    # expect: clean
    def run_micro_batches_replannable(self, micro_batches: Sequence[ForwardBatch]) -> List:
        outputs = []
        backend = self.model_runner.attn_backend
        for mb in micro_batches:
            if not mb.forward_mode.is_idle() and not graph_can_run(
                self.model_runner, mb
            ):
                backend.init_forward_metadata(mb)
                mb.mark_forward_metadata_ready(replan_equivalent=True)
            outputs.append(self.model_runner.forward(mb))
            self.micro_batches_run += 1
        return outputs
