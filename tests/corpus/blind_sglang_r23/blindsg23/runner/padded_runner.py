"""The fork's own eager forward for the draft model, with its own DP padding.

``DpPaddedEagerRunner`` mirrors the eager branch of ``ModelRunner._forward_raw``
(MLP-sync padding, then plan only when the batch asks for it, then the model)
without the cuda-graph and PP plumbing the draft never needs.
"""

from __future__ import annotations

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.model_executor.model_runner import ModelRunner


class DpPaddedEagerRunner:
    def __init__(self, model_runner: ModelRunner):
        self.model_runner = model_runner

    def pad(self, forward_batch: ForwardBatch) -> bool:
        if forward_batch.global_num_tokens_cpu is None:
            return False
        forward_batch.prepare_mlp_sync_batch(self.model_runner)
        return True

    def run_padded(self, forward_batch: ForwardBatch, padded: bool):
        mr = self.model_runner
        if forward_batch.needs_forward_metadata_init():
            mr.attn_backend.init_forward_metadata(forward_batch)
        with forward_context(
            ForwardContext(attn_backend=mr.attn_backend), forward_batch=forward_batch
        ):
            logits_output = mr.model.forward(
                forward_batch.input_ids, forward_batch.positions, forward_batch
            )
        if padded:
            forward_batch.post_forward_mlp_sync_batch(logits_output)
        return logits_output

    # idiom: model_executor/model_runner.py ModelRunner._forward_raw + runner/eager_runner.py EagerRunner._execute_decode (pad, then needs_forward_metadata_init)
    # expect: clean
    def run(self, forward_batch: ForwardBatch):
        padded = self.pad(forward_batch)
        return self.run_padded(forward_batch, padded)


class _DriverBase:
    def __init__(self, model_runner: ModelRunner):
        self.model_runner = model_runner
        self.runner = DpPaddedEagerRunner(model_runner)


class PreplanThenPadDriver(_DriverBase):
    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft (pre-plan + mark) feeding a padding eager forward
    # expect: SG106
    def step(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.runner.run(forward_batch)


class PadThenPlanDriver(_DriverBase):
    # idiom: model_executor/model_runner.py ModelRunner._forward_raw ordering (padding before the plan)
    # expect: clean
    def step(self, forward_batch: ForwardBatch):
        padded = self.runner.pad(forward_batch)
        if not forward_batch.forward_mode.is_idle():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.runner.run_padded(forward_batch, padded)


class ExplicitPadDriver(_DriverBase):
    # idiom: model_executor/model_runner.py ModelRunner._prepare_eager_forward_batch + EagerRunner.execute after a pre-plan
    # expect: SG106
    def step(self, forward_batch: ForwardBatch):
        mr = self.model_runner
        if not forward_batch.forward_mode.is_idle():
            mr.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        mr._prepare_eager_forward_batch(forward_batch)
        logits_output = mr.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(logits_output)
        return logits_output
