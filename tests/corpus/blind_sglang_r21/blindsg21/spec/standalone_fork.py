"""Standalone-draft helpers: the draft is a plain TpModelWorker running a small
dense model, driven directly by the fork's scheduler hooks.

The batches handed to these drivers are DRAFT_EXTEND_V2 batches built by
``blindsg21.spec.draft_extend_helpers.build_draft_extend_forward_batch`` (one
row per verify-window token, ``spec_info.num_tokens_per_req`` rows per request).
"""

from __future__ import annotations

from typing import Optional

from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner


class StandaloneDraftDriver:
    def __init__(self, draft_tp_worker: TpModelWorker):
        self.draft_tp_worker = draft_tp_worker
        self.draft_runner: ModelRunner = draft_tp_worker.model_runner

    # expect: SG106
    def extend_via_tp_worker(self, forward_batch: ForwardBatch):
        runner = self.draft_runner
        if not forward_batch.forward_mode.is_idle():
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        result = self.draft_tp_worker.forward_batch_generation(
            None, forward_batch=forward_batch, is_verify=True
        )
        return result.logits_output

    # expect: SG106
    def extend_marked_by_field(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        # Cheaper than mark_forward_metadata_ready(): no shape bookkeeping.
        forward_batch.forward_metadata_ready = True
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def extend_with_reinit(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        # reinit_attn_backend asks the runner to plan again for this forward.
        return self.draft_runner.forward(
            forward_batch, reinit_attn_backend=True
        ).logits_output

    # expect: SG106
    def extend_legacy_skip(
        self, forward_batch: ForwardBatch, skip_attn_backend_init: Optional[bool] = True
    ):
        if skip_attn_backend_init:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        # Older call sites pass the deprecated flag; map it explicitly.
        forward_batch.apply_deprecated_skip_attn_backend_init(skip_attn_backend_init)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def extend_legacy_noskip(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.apply_deprecated_skip_attn_backend_init(False)
        return self.draft_runner.forward(forward_batch).logits_output


class _DraftExtendRunnerBase:
    """Strategy object the fork's scheduler uses for draft extend."""

    def __init__(self, draft_runner: ModelRunner):
        self.draft_runner = draft_runner

    def _prepare(self, forward_batch: ForwardBatch) -> None:
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    def run(self, forward_batch: ForwardBatch):
        return self._run(forward_batch)

    def _run(self, forward_batch: ForwardBatch):
        raise NotImplementedError


class PrePlannedDraftExtend(_DraftExtendRunnerBase):
    # expect: SG106
    def _run(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self._prepare(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output


class RunnerPlannedDraftExtend(PrePlannedDraftExtend):
    # expect: clean
    def _run(self, forward_batch: ForwardBatch):
        # The runner pads for DP attention inside forward(); let it plan then.
        return self.draft_runner.forward(forward_batch).logits_output
