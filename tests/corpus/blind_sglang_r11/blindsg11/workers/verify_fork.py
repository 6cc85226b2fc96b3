"""Target-verify entry points for the EAGLE v2 worker fork.

The verify ForwardBatch (TARGET_VERIFY) is built by the caller from the
verify input; these run it on the target worker.
"""

from __future__ import annotations

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2


class GraphAwareVerifyWorker(EAGLEWorkerV2):
    # expect: clean
    def verify_forward_graph_marked(self, verify_forward_batch: ForwardBatch):
        runner = self.target_worker.model_runner
        graph_runner = runner.decode_cuda_graph_runner
        can_run_cuda_graph = bool(
            graph_runner and graph_runner.can_run_graph(verify_forward_batch)
        )
        if can_run_cuda_graph:
            # Replay path: load_batch fills the static buffers + metadata and
            # the graph replays without MLP-sync padding.
            graph_runner.load_batch(verify_forward_batch)
            verify_forward_batch.mark_forward_metadata_ready()
        out = self.target_worker.forward_batch_generation(
            batch=None, forward_batch=verify_forward_batch, is_verify=True
        )
        return out.logits_output, can_run_cuda_graph

    # expect: clean
    def verify_forward_eager_marked(self, verify_forward_batch: ForwardBatch):
        """Verify with the eager plan issued on the plan stream (overlaps the
        draft tail). The target runner's eager extend path re-plans every
        TARGET_VERIFY batch after MLP-sync padding regardless of the mark; the
        early plan only warms the backend's host buffers."""
        assert verify_forward_batch.forward_mode.is_target_verify()
        runner = self.target_worker.model_runner
        graph_runner = runner.decode_cuda_graph_runner
        if graph_runner and graph_runner.can_run_graph(verify_forward_batch):
            graph_runner.load_batch(verify_forward_batch)
        else:
            with self.plan_stream_ctx:
                runner.attn_backend.init_forward_metadata(verify_forward_batch)
        verify_forward_batch.mark_forward_metadata_ready()
        out = self.target_worker.forward_batch_generation(
            batch=None, forward_batch=verify_forward_batch, is_verify=True
        )
        return out.logits_output
