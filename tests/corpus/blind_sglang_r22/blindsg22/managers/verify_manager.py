"""Spec-step manager: runs the draft extend that follows each target verify.

The fork drives the draft model through its TpModelWorker (logits only,
``is_verify=True`` skips sampling) so that the draft can be swapped for any
worker type.
"""

from __future__ import annotations

from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

from blindsg22.common.planning import PlanRecord
from blindsg22.managers.dp_padding import pad_for_dp_attention

_DRAFT_EXTEND_PLAN_CFG = {"preplan": True, "replan_equivalent": False}
_PAD_FIRST_PLAN_CFG = {"preplan": True, "pad_first": True}


class ForkSpecStepManager:
    """Owns the target and draft TP workers of one speculative step."""

    target_worker: TpModelWorker
    draft_tp_worker: TpModelWorker

    def __init__(self, target_worker: TpModelWorker, draft_tp_worker: TpModelWorker):
        self.target_worker = target_worker
        self.draft_tp_worker = draft_tp_worker

    # -- plan records (unjudged helpers) ---------------------------------

    def _plan_record(self, forward_batch: ForwardBatch, replan_equivalent: bool) -> PlanRecord:
        self.draft_tp_worker.model_runner.attn_backend.init_forward_metadata(
            forward_batch
        )
        return PlanRecord(forward_batch, replan_equivalent)

    @staticmethod
    def _apply_record(record: PlanRecord) -> ForwardBatch:
        record.forward_batch.mark_forward_metadata_ready(
            replan_equivalent=record.replan_equivalent
        )
        return record.forward_batch

    # -- draft extend through the TP worker ------------------------------

    # idiom: sglang/srt/managers/tp_worker.py TpModelWorker.forward_batch_generation (deprecated skip_attn_backend_init mapped onto the readiness mark)
    # expect: SG106
    def draft_extend_via_tp_worker(self, forward_batch: ForwardBatch) -> GenerationBatchResult:
        draft_runner = self.draft_tp_worker.model_runner
        if not forward_batch.forward_mode.is_idle():
            draft_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.draft_tp_worker.forward_batch_generation(
            batch=None,
            forward_batch=forward_batch,
            is_verify=True,
            skip_attn_backend_init=True,
        )

    # idiom: sglang/srt/speculative/eagle_worker_v2.py (plan-stream record handed to the compute stream as a namedtuple)
    # expect: SG106
    def draft_extend_from_record(self, forward_batch: ForwardBatch) -> GenerationBatchResult:
        record = self._plan_record(forward_batch, False)
        forward_batch = self._apply_record(record)
        return self.draft_tp_worker.forward_batch_generation(
            batch=None, forward_batch=forward_batch, is_verify=True
        )

    # idiom: sglang/srt/speculative/eagle_worker_v2.py (namedtuple plan record, replan-equivalent)
    # expect: clean
    def draft_extend_from_replan_record(
        self, forward_batch: ForwardBatch
    ) -> GenerationBatchResult:
        record = self._plan_record(forward_batch, True)
        forward_batch = self._apply_record(record)
        return self.draft_tp_worker.forward_batch_generation(
            batch=None, forward_batch=forward_batch, is_verify=True
        )

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (policy from a dict config)
    # expect: SG106
    def draft_extend_with_cfg(self, forward_batch: ForwardBatch) -> GenerationBatchResult:
        cfg = _DRAFT_EXTEND_PLAN_CFG
        draft_runner = self.draft_tp_worker.model_runner
        if cfg["preplan"]:
            draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=cfg["replan_equivalent"]
            )
        return self.draft_tp_worker.forward_batch_generation(
            batch=None, forward_batch=forward_batch, is_verify=True
        )

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._forward_raw order (pad, plan, eager runner) selected by a dict config
    # expect: clean
    def draft_extend_with_pad_cfg(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        cfg = _PAD_FIRST_PLAN_CFG
        draft_runner = self.draft_tp_worker.model_runner
        if not (cfg["preplan"] and cfg["pad_first"]):
            return draft_runner.forward(forward_batch).logits_output
        pad_for_dp_attention(forward_batch, draft_runner)
        draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        logits_output = draft_runner.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(logits_output)
        return logits_output
