"""N-gram speculative worker that plans the eager target-verify batch on the
host while the n-gram corpus lookup of the next batch runs."""

from __future__ import annotations

from typing import Optional

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, PPProxyTensors
from sglang.srt.speculative.ngram_worker import NGRAMWorker


class HostPlannedNgramWorker(NGRAMWorker):
    # expect: clean
    def _verify_forward(
        self,
        batch: ScheduleBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> GenerationBatchResult:
        assert batch.forward_mode.is_target_verify()
        forward_batch = ForwardBatch.init_new(
            batch,
            self.model_runner,
            return_hidden_states_before_norm=False,
        )
        graph_runner = self.model_runner.decode_cuda_graph_runner
        replays = graph_runner is not None and graph_runner.can_run_graph(
            forward_batch
        )
        if not replays:
            # Eager verify: the eager runner re-plans every TARGET_VERIFY batch
            # from its final (post-pad) shape, so this host plan only warms
            # the verify wrapper.
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.target_worker.forward_batch_generation(
            None,
            forward_batch=forward_batch,
            pp_proxy_tensors=pp_proxy_tensors,
            is_verify=True,
        )
