"""Fork NGRAM worker: target forwards built (and pre-planned) by the worker."""

from __future__ import annotations

import logging

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.ngram_worker import NGRAMWorker

logger = logging.getLogger(__name__)


class ForkNGRAMWorker(NGRAMWorker):
    """Builds the target ForwardBatch itself so planning overlaps the corpus match."""

    def _init_target_batch(self, batch: ScheduleBatch) -> ForwardBatch:
        return ForwardBatch.init_new(
            batch,
            self.model_runner,
            return_hidden_states_before_norm=False,
        )

    # idiom: sglang/srt/speculative/ngram_worker.py NGRAMWorker.forward_batch_generation (extend branch) with the target prefill pre-planned and marked
    # expect: SG106
    def _forward_target_extend(self, batch: ScheduleBatch, pp_proxy_tensors=None):
        forward_batch = self._init_target_batch(batch)
        if not forward_batch.forward_mode.is_idle():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.target_worker.forward_batch_generation(
            None,
            forward_batch=forward_batch,
            pp_proxy_tensors=pp_proxy_tensors,
        )

    # idiom: sglang/srt/speculative/eagle_utils.py eagle_prepare_for_verify (mark only after the decode graph's load_batch; eager verify planned post-pad) in NGRAMWorker
    # expect: clean
    def _forward_target_verify(self, batch: ScheduleBatch, pp_proxy_tensors=None):
        verify_forward_batch = self._init_target_batch(batch)
        graph_runner = self.model_runner.decode_cuda_graph_runner
        if graph_runner is not None and graph_runner.can_run_graph(verify_forward_batch):
            graph_runner.load_batch(verify_forward_batch)
            verify_forward_batch.mark_forward_metadata_ready()
        return self.target_worker.forward_batch_generation(
            None,
            forward_batch=verify_forward_batch,
            pp_proxy_tensors=pp_proxy_tensors,
            is_verify=True,
        )
