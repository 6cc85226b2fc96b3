"""Target-side experiments: verify with a pre-planned batch, prefill re-runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

if TYPE_CHECKING:
    from sglang.srt.managers.tp_worker import TpModelWorker


class VerifyLab:
    def __init__(self, target_worker: "TpModelWorker"):
        self.target_worker = target_worker

    def _can_graph(self, forward_batch: ForwardBatch) -> bool:
        graph_runner = self.target_worker.model_runner.decode_cuda_graph_runner
        return bool(graph_runner and graph_runner.can_run_graph(forward_batch))

    # idiom: speculative/eagle_worker_common.py run_eagle_verify (metadata_ready_pre_pad); TARGET_VERIFY pre-planned+marked, eager extend re-plans verify regardless of the mark
    # expect: clean
    def verify_preplanned(self, verify_forward_batch: ForwardBatch):
        runner = self.target_worker.model_runner
        if not verify_forward_batch.forward_mode.is_target_verify():
            raise ValueError("verify_preplanned expects a TARGET_VERIFY batch")
        if (
            not self._can_graph(verify_forward_batch)
            and not verify_forward_batch.is_extend_in_batch
        ):
            runner.attn_backend.init_forward_metadata(verify_forward_batch)
            verify_forward_batch.mark_forward_metadata_ready()
        result = self.target_worker.forward_batch_generation(
            batch=None, forward_batch=verify_forward_batch, is_verify=True
        )
        return result.logits_output

    # idiom: speculative/eagle_utils.py eagle_prepare_for_verify; graph arm load_batch+mark, eager arm left unplanned
    # expect: clean
    def verify_graph_or_eager(self, verify_forward_batch: ForwardBatch):
        runner = self.target_worker.model_runner
        if self._can_graph(verify_forward_batch):
            runner.decode_cuda_graph_runner.load_batch(verify_forward_batch)
            verify_forward_batch.mark_forward_metadata_ready()
        result = self.target_worker.forward_batch_generation(
            batch=None, forward_batch=verify_forward_batch, is_verify=True
        )
        return result.logits_output

    # idiom: managers/tp_worker.py TpModelWorker.forward_batch_generation; plain EXTEND re-run pre-planned+marked on the target, then handed in as forward_batch
    # expect: SG106
    def prefill_rerun(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode != ForwardMode.EXTEND:
            raise ValueError("prefill_rerun expects a plain EXTEND batch")
        runner = self.target_worker.model_runner
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        result = self.target_worker.forward_batch_generation(
            batch=None, forward_batch=forward_batch
        )
        return result.logits_output
