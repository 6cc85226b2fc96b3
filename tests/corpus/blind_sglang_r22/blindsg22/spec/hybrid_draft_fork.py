"""Hybrid (prefill / decode) attention backend driving the draft extend."""

from __future__ import annotations

from sglang.srt.layers.attention.hybrid_attn_backend import HybridAttnBackend
from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner


class ForkHybridDraftPlanner:
    """Plans the draft-extend batch on the hybrid backend's selected child."""

    draft_runner: ModelRunner
    hybrid_backend: HybridAttnBackend

    def __init__(self, draft_runner: ModelRunner):
        self.draft_runner = draft_runner
        # The draft runner was built with --attention-backend hybrid.
        self.hybrid_backend: HybridAttnBackend = draft_runner.attn_backend

    # idiom: sglang/srt/layers/attention/hybrid_attn_backend.py HybridAttnBackend._select_backend (plan the sub-backend directly)
    # expect: SG106
    def plan_and_run(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        backend = self.hybrid_backend._select_backend(forward_batch.forward_mode)
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/layers/attention/hybrid_attn_backend.py HybridAttnBackend.init_forward_metadata delegates to the same sub-backend, so the mark is replan-equivalent
    # expect: clean
    def plan_and_run_replan(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        backend = self.hybrid_backend._select_backend(forward_batch.forward_mode)
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.draft_runner.forward(forward_batch).logits_output
