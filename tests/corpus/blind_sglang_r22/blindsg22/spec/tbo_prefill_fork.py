"""Two-batch-overlap prefill with the fork's pre-planning."""

from __future__ import annotations

from sglang.srt.layers.attention.tbo_backend import TboAttnBackend
from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner


class ForkTboPrefillRunner:
    """Runs target prefill batches when ``enable_two_batch_overlap`` is on."""

    model_runner: ModelRunner
    tbo_backend: TboAttnBackend

    def __init__(self, model_runner: ModelRunner):
        self.model_runner = model_runner
        # With two-batch overlap the runner's backend is the TBO dispatcher.
        self.tbo_backend: TboAttnBackend = model_runner.attn_backend

    # idiom: sglang/srt/layers/attention/tbo_backend.py TboAttnBackend.init_forward_metadata (primary + tbo_children) before batch_overlap/two_batch_overlap.py TboForwardBatchPreparer.prepare splits the padded batch
    # expect: SG106
    def run_prefill(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        self.tbo_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.model_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._prepare_eager_forward_batch (pads and builds tbo_children) then TboAttnBackend.init_forward_metadata
    # expect: clean
    def run_prefill_post_split(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        model_runner = self.model_runner
        model_runner._prepare_eager_forward_batch(forward_batch)
        # tbo_children exist now: plan the primary and both children.
        self.tbo_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        logits_output = model_runner.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(logits_output)
        return logits_output
