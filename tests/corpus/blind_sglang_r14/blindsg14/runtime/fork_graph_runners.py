"""Graph-runner subclasses with eager fallbacks.

Upstream callers check ``can_run_graph`` themselves; the fork folds the check
into the runner so workers can call one method for either path.
"""

from __future__ import annotations

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.runner import DecodeCudaGraphRunner
from sglang.srt.speculative.eagle_draft_cuda_graph_runner import (
    EAGLEDraftCudaGraphRunner,
)
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import (
    EAGLEDraftExtendCudaGraphRunner,
)


class FallbackEAGLEDraftCudaGraphRunner(EAGLEDraftCudaGraphRunner):
    # expect: SG106
    def execute_or_eager(self, forward_batch: ForwardBatch):
        if self.can_run_graph(forward_batch):
            return self.execute(forward_batch)
        worker = self.eagle_worker
        if not forward_batch.forward_mode.is_idle():
            worker.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return worker.draft_forward(forward_batch)

    # expect: clean
    def execute_graph_only(self, forward_batch: ForwardBatch):
        if not self.can_run_graph(forward_batch):
            raise RuntimeError(
                f"draft batch of size {forward_batch.batch_size} exceeds the "
                "captured draft graphs; raise --cuda-graph-max-bs"
            )
        # Replay pads its static buffers to the bucket and re-plans on them.
        return self.execute(forward_batch)


class FallbackEAGLEDraftExtendCudaGraphRunner(EAGLEDraftExtendCudaGraphRunner):
    # expect: SG106
    def replay_or_eager(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        if self.can_run_graph(forward_batch):
            return self.execute(forward_batch, select_index)
        runner = self.model_runner
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        out = runner.forward(forward_batch).logits_output
        out.next_token_logits = out.next_token_logits[select_index]
        if out.hidden_states is not None:
            out.hidden_states = out.hidden_states[select_index]
        return out

    # expect: clean
    def execute(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        # Idle DP ranks still replay (collectives); make sure a stale marker
        # from the previous step does not leak into the graph's load_batch.
        if forward_batch.forward_mode.is_idle():
            forward_batch.forward_metadata_ready = False
        return super().execute(forward_batch, select_index)


class MarkedDecodeCudaGraphRunner(DecodeCudaGraphRunner):
    # expect: clean
    def execute_preloaded(self, forward_batch: ForwardBatch, pp_proxy_tensors=None):
        # Plan on the plan stream (load_batch), then replay.  The replay path
        # never runs MLP-sync padding on the live batch.
        self.load_batch(forward_batch, pp_proxy_tensors)
        forward_batch.mark_forward_metadata_ready()
        return self.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
