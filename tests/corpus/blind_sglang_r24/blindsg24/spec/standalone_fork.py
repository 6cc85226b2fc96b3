"""Standalone-draft patches: the draft extend goes through the fork's shared
plan helpers (blindsg24.common.plan_helpers) instead of inline code."""

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker

from blindsg24.common.plan_helpers import (
    preplan_for_runner,
    preplan_for_runner_replannable,
    run_runner_logits,
)
from blindsg24.spec.eagle_fork import _DraftExtendBatchMixin


class ForkStandaloneDraftWorker(_DraftExtendBatchMixin, StandaloneDraftWorker):
    # idiom: sglang/srt/speculative/standalone_worker_v2.py StandaloneDraftWorker (inherits EagleDraftWorker._draft_extend_for_decode); plan in blindsg24.common.plan_helpers
    # expect: SG106
    def draft_extend_via_helper(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        forward_batch = self._build_decode_draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            forward_batch = preplan_for_runner(self.draft_runner, forward_batch)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._select_last_accepted(batch, batch_result, logits_output)

    # idiom: sglang/srt/speculative/standalone_worker_v2.py StandaloneDraftWorker; plan in blindsg24.common.plan_helpers (replan_equivalent=True)
    # expect: clean
    def draft_extend_via_replannable_helper(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        forward_batch = self._build_decode_draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            forward_batch = preplan_for_runner_replannable(
                self.draft_runner, forward_batch
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._select_last_accepted(batch, batch_result, logits_output)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode; forward in blindsg24.common.plan_helpers.run_runner_logits
    # expect: SG106
    def draft_extend_run_helper(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        forward_batch = self._build_decode_draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = run_runner_logits(self.draft_runner, forward_batch)
        self._select_last_accepted(batch, batch_result, logits_output)

    # idiom: sglang/srt/managers/tp_worker.py TpModelWorker.forward_batch_generation (apply_deprecated_skip_attn_backend_init)
    # expect: SG106
    def draft_extend_apply_deprecated(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        forward_batch = self._build_decode_draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.apply_deprecated_skip_attn_backend_init(True)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._select_last_accepted(batch, batch_result, logits_output)

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._forward_raw (pad -> plan -> eager -> unpad)
    # expect: clean
    def draft_extend_replan_after_pad(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        forward_batch = self._build_decode_draft_extend_batch(batch, batch_result)
        backend = self.draft_runner.attn_backend
        if not forward_batch.forward_mode.is_idle():
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self.draft_runner)
            # Padding grew the batch: plan again for the padded geometry.
            backend.init_forward_metadata(forward_batch)
        logits_output = self.draft_runner.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(logits_output)
        self._select_last_accepted(batch, batch_result, logits_output)
