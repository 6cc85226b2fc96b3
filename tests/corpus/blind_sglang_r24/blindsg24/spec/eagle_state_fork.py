"""Draft workers whose plan-ahead behaviour is decided once, at construction,
and kept on ``self``."""

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import require_mlp_sync

from blindsg24.spec.eagle_fork import _DraftExtendBatchMixin


class PlanAheadDraftWorker(_DraftExtendBatchMixin, EagleDraftWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Always plan the eager draft extend on the plan stream.
        self.plan_ahead_draft_extend = True
        self.last_planned_bs = 0

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (plan_stream_ctx pre-plan)
    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan=None,
    ):
        with self.plan_stream_ctx:
            forward_batch = self._build_decode_draft_extend_batch(batch, batch_result)
            if self.plan_ahead_draft_extend and not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                self.last_planned_bs = forward_batch.batch_size
        if self.plan_stream:
            self.plan_stream.synchronize()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._select_last_accepted(batch, batch_result, logits_output)


class MlpSyncAwarePlanAheadDraftWorker(_DraftExtendBatchMixin, EagleDraftWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Under MLP sync (DP attention) ModelRunner pads the batch after any
        # plan we make here; only plan ahead when nothing will pad it.
        self.plan_ahead_draft_extend = not require_mlp_sync()
        self.last_planned_bs = 0

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode; utils/common.require_mlp_sync
    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan=None,
    ):
        with self.plan_stream_ctx:
            forward_batch = self._build_decode_draft_extend_batch(batch, batch_result)
            if self.plan_ahead_draft_extend and not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                self.last_planned_bs = forward_batch.batch_size
        if self.plan_stream:
            self.plan_stream.synchronize()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._select_last_accepted(batch, batch_result, logits_output)
