"""Micro-batched decode: split a decode batch into N micro-batches, each with
its own attention backend instance, and forward them back to back so the
host planning of micro-batch i+1 overlaps the kernels of micro-batch i."""

from __future__ import annotations

from typing import List, Sequence

from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.model_executor.model_runner import ModelRunner


class MicroBatchDecodeDriver:
    def __init__(self, model_runner: ModelRunner, backends: Sequence[AttentionBackend]):
        self.model_runner = model_runner
        self.backends = list(backends)

    # expect: SG106
    def forward_micro_batches(
        self, micro_batches: List[ForwardBatch]
    ) -> List[LogitsProcessorOutput]:
        assert len(micro_batches) <= len(self.backends)
        # Plan every micro-batch up front on its own backend...
        for backend, mb in zip(self.backends, micro_batches):
            if mb.forward_mode.is_idle():
                continue
            backend.init_forward_metadata(mb)
            mb.mark_forward_metadata_ready()

        # ...then launch them back to back.
        outputs = []
        for backend, mb in zip(self.backends, micro_batches):
            with forward_context(ForwardContext(attn_backend=backend), forward_batch=mb):
                outputs.append(self.model_runner.forward(mb).logits_output)
        return outputs

    # expect: clean
    def forward_micro_batches_warm(
        self, micro_batches: List[ForwardBatch]
    ) -> List[LogitsProcessorOutput]:
        """Variant for the runner's own backend: the up-front pass only warms
        the wrapper workspaces; each forward still plans its padded batch."""
        backend = self.model_runner.attn_backend
        for mb in micro_batches:
            if not mb.forward_mode.is_idle():
                backend.init_forward_metadata(mb)
        outputs = []
        for mb in micro_batches:
            outputs.append(self.model_runner.forward(mb).logits_output)
        return outputs
