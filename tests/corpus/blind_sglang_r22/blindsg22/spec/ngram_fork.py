"""NGRAM speculative worker fork: the target verify is planned on the plan stream."""

from __future__ import annotations

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch
from sglang.srt.speculative.ngram_worker import NGRAMWorker


class ForkNgramWorker(NGRAMWorker):
    """NGRAM worker that pre-plans the target verify batch."""

    target_worker: TpModelWorker

    # idiom: sglang/srt/speculative/eagle_utils.py eagle_prepare_for_verify + sglang/srt/model_executor/runner/eager_runner.py EagerRunner._execute_extend (target verify is re-planned from the padded batch on every eager/prefill-graph forward)
    # expect: clean
    def verify_preplanned(self, batch: ScheduleBatch) -> GenerationBatchResult:
        model_runner = self.target_worker.model_runner
        verify_forward_batch = ForwardBatch.init_new(
            batch,
            model_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            return_hidden_states_before_norm=False,
        )
        graph_runner = model_runner.decode_cuda_graph_runner
        can_run_cuda_graph = bool(
            graph_runner and graph_runner.can_run_graph(verify_forward_batch)
        )
        if can_run_cuda_graph:
            graph_runner.load_batch(verify_forward_batch)
        elif not verify_forward_batch.forward_mode.is_idle():
            model_runner.attn_backend.init_forward_metadata(verify_forward_batch)
        # The deprecated kwarg marks the batch; the eager verify path plans
        # TARGET_VERIFY again after DP padding regardless of the mark.
        return self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
            skip_attn_backend_init=True,
        )
