"""Draft forwards whose planning travels through context managers, closures,
partials and properties."""

from __future__ import annotations

import functools
from typing import Any

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

from blindsg40.config.settings import ParallelSettings
from blindsg40.spec.components import (
    EagerModelRunner,
    MlpSyncPadder,
    plan_and_mark,
    plan_on_enter,
    replannable_plan_on_enter,
)


class ScopedDraftPlanner:
    def __init__(self, draft_runner: Any, parallel: ParallelSettings):
        self.draft_runner = draft_runner
        self.parallel = parallel
        self.padder = MlpSyncPadder(draft_runner)
        self.eager = EagerModelRunner(draft_runner)

    @classmethod
    def from_server_args(cls, server_args, draft_runner):
        return cls(draft_runner, ParallelSettings.from_server_args(server_args))

    @property
    def planning_backend(self):
        return self.draft_runner.attn_backend

    # expect: SG106
    def decode_scoped(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DECODE
        with plan_on_enter(self.draft_runner.attn_backend, forward_batch) as fb:
            return self.draft_runner.forward(fb).logits_output

    # expect: clean
    def decode_scoped_replannable(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DECODE
        with replannable_plan_on_enter(self.draft_runner.attn_backend, forward_batch) as fb:
            return self.draft_runner.forward(fb).logits_output

    # expect: SG106
    def draft_extend_closure(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        backend = self.draft_runner.attn_backend

        def _preplan():
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        _preplan()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_closure_after_pad(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        backend = self.draft_runner.attn_backend

        def _preplan():
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        self.padder.pad(forward_batch)
        _preplan()
        out = self.eager.run(forward_batch)
        return self.padder.unpad(forward_batch, out)

    # expect: SG106
    def decode_partial(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DECODE
        preplan = functools.partial(plan_and_mark, self.draft_runner.attn_backend)
        preplan(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def decode_partial_replannable(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DECODE
        preplan = functools.partial(
            plan_and_mark, self.draft_runner.attn_backend, replan_equivalent=True
        )
        preplan(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def decode_via_property(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DECODE
        self.planning_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        self.padder.pad(forward_batch)
        out = self.eager.run(forward_batch)
        return self.padder.unpad(forward_batch, out)

    # expect: clean
    def decode_via_property_unmarked(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DECODE
        self.planning_backend.init_forward_metadata(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_guarded_restore(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        saved_seq_lens = forward_batch.seq_lens
        forward_batch.seq_lens = saved_seq_lens + forward_batch.extend_seq_lens
        try:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            return self.draft_runner.forward(forward_batch).logits_output
        finally:
            forward_batch.seq_lens = saved_seq_lens

    # expect: clean
    def draft_extend_guarded_restore_padded(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        padded = False
        try:
            padded = self.padder.pad(forward_batch)
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            return self.eager.run(forward_batch)
        finally:
            if padded:
                forward_batch.global_num_tokens_cpu = None
