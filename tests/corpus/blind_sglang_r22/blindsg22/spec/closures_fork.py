"""Draft-extend drivers whose planning travels through closures, partials
and generators (plan-stream callbacks in the fork's overlap scheduler)."""

from __future__ import annotations

import functools
from typing import List

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg22.common.planning import iter_planned, plan_and_mark


class ForkDraftExtendCallbacks:
    draft_runner: ModelRunner

    def __init__(self, draft_runner: ModelRunner):
        self.draft_runner = draft_runner

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (plan-stream closure)
    # expect: SG106
    def run_with_closure(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        backend = self.draft_runner.attn_backend

        def _preplan() -> None:
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        _preplan()
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (plan-stream closure, replan-equivalent flag captured)
    # expect: clean
    def run_with_replan_closure(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        backend = self.draft_runner.attn_backend
        replan_equivalent = backend is self.draft_runner.attn_backend

        def _preplan() -> None:
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=replan_equivalent
            )

        _preplan()
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (planner bound with functools.partial)
    # expect: SG106
    def run_with_partial(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        preplan = functools.partial(plan_and_mark, self.draft_runner.attn_backend)
        preplan(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (partial binds replan_equivalent=True)
    # expect: clean
    def run_with_replan_partial(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        preplan = functools.partial(
            plan_and_mark, self.draft_runner.attn_backend, replan_equivalent=True
        )
        preplan(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py (micro-batched draft extend, batches planned by a generator)
    # expect: SG106
    def run_micro_batches(
        self, forward_batches: List[ForwardBatch]
    ) -> List[LogitsProcessorOutput]:
        outputs: List[LogitsProcessorOutput] = []
        for forward_batch in iter_planned(
            self.draft_runner.attn_backend, forward_batches, mark=True
        ):
            outputs.append(self.draft_runner.forward(forward_batch).logits_output)
        return outputs

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py (micro-batched draft extend, generator plans without marking)
    # expect: clean
    def run_micro_batches_unmarked(
        self, forward_batches: List[ForwardBatch]
    ) -> List[LogitsProcessorOutput]:
        outputs: List[LogitsProcessorOutput] = []
        for forward_batch in iter_planned(
            self.draft_runner.attn_backend, forward_batches, mark=False
        ):
            outputs.append(self.draft_runner.forward(forward_batch).logits_output)
        return outputs
