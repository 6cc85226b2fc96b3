"""Scheduler-side mixin: runs a decode batch on the target TpModelWorker with
an optional attention pre-plan off the critical path."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

from blindsg29.config import VendorServingFlags, get_vendor_flags
from blindsg29.reliability import plan_utils

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.tp_worker import TpModelWorker

logger = logging.getLogger(__name__)


class VendorSchedulerPlanMixin:
    tp_worker: "TpModelWorker"

    @property
    def vendor_flags(self) -> VendorServingFlags:
        return get_vendor_flags(getattr(self, "server_args", None))

    def _target_forward_batch(self, batch: "ScheduleBatch") -> ForwardBatch:
        return ForwardBatch.init_new(
            batch, self.tp_worker.model_runner, return_hidden_states_before_norm=False
        )

    def _decode_graph_ok(self, forward_batch: ForwardBatch) -> bool:
        runner = self.tp_worker.model_runner
        return plan_utils.decode_graph_can_run(
            getattr(runner, "decode_cuda_graph_runner", None), forward_batch
        )

    # idiom: scheduler run_batch -> tp_worker.TpModelWorker.forward_batch_generation(forward_batch=...) with the pre-plan done by a helper in another module
    # expect: SG106
    def run_decode_batch_preplanned(self, batch: "ScheduleBatch"):
        if batch.forward_mode.is_idle() or not batch.forward_mode.is_decode():
            return self.tp_worker.forward_batch_generation(batch)
        forward_batch = self._target_forward_batch(batch)
        if not self._decode_graph_ok(forward_batch):
            plan_utils.preplan_forward_batch(
                self.tp_worker.model_runner.attn_backend, forward_batch
            )
        return self.tp_worker.forward_batch_generation(None, forward_batch=forward_batch)

    # idiom: scheduler run_batch -> TpModelWorker.forward_batch_generation, pre-plan only when DP attention is off (no MLP-sync padding)
    # expect: clean
    def run_decode_batch_dp_safe(self, batch: "ScheduleBatch"):
        if batch.forward_mode.is_idle() or self.vendor_flags.dp_attention_on:
            return self.tp_worker.forward_batch_generation(batch)
        forward_batch = self._target_forward_batch(batch)
        if plan_utils.dp_padding_expected(forward_batch):
            return self.tp_worker.forward_batch_generation(None, forward_batch=forward_batch)
        if not self._decode_graph_ok(forward_batch):
            plan_utils.preplan_forward_batch(
                self.tp_worker.model_runner.attn_backend, forward_batch
            )
        return self.tp_worker.forward_batch_generation(None, forward_batch=forward_batch)

    # idiom: scheduler idle-batch path (DP attention keeps idle ranks in every collective); EagerRunner._execute_idle plans
    # expect: clean
    def run_idle_batch(self, batch: "ScheduleBatch"):
        if not batch.forward_mode.is_idle():
            raise ValueError("run_idle_batch expects an IDLE batch")
        forward_batch = self._target_forward_batch(batch)
        return self.tp_worker.forward_batch_generation(None, forward_batch=forward_batch)

    # idiom: tp_worker forward launched through a local closure after an inline plan + mark of the decode batch
    # expect: SG106
    def run_decode_closure(self, batch: "ScheduleBatch"):
        runner = self.tp_worker.model_runner
        forward_batch = self._target_forward_batch(batch)

        def _launch():
            return runner.forward(forward_batch).logits_output

        if forward_batch.forward_mode.is_idle() or self._decode_graph_ok(forward_batch):
            return _launch()
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return _launch()

    # idiom: forward_batch_info.mark_forward_metadata_ready looked up with getattr (older SGLang builds lack it) after a decode pre-plan
    # expect: SG106
    def run_decode_getattr_mark(self, batch: "ScheduleBatch"):
        runner = self.tp_worker.model_runner
        forward_batch = self._target_forward_batch(batch)
        if not forward_batch.forward_mode.is_idle() and not self._decode_graph_ok(
            forward_batch
        ):
            runner.attn_backend.init_forward_metadata(forward_batch)
            mark = getattr(forward_batch, "mark_forward_metadata_ready", None)
            if mark is not None:
                mark()
            else:
                return self.tp_worker.forward_batch_generation(
                    None, forward_batch=forward_batch, skip_attn_backend_init=True
                )
        return self.tp_worker.forward_batch_generation(None, forward_batch=forward_batch)
