"""Fork's diffusion-LM block algorithm with fixed-canvas metadata reuse."""

from __future__ import annotations

from sglang.srt.dllm.algorithm.base import DllmAlgorithm, DllmRunOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner


class CanvasReuseDllmAlgorithm(DllmAlgorithm):
    """Low-confidence remasking; every denoise step reuses the first plan."""

    reuse_forward_metadata = True

    def _run_sync(self, model_runner: ModelRunner, forward_batch: ForwardBatch) -> DllmRunOutput:
        # idiom: dllm/algorithm/base.py DllmAlgorithm._run_sync
        # expect: clean
        batch_size = forward_batch.batch_size
        start_list = self._block_start_list(forward_batch)
        states = self.init_step_state(forward_batch)
        self.prepare_inputs(model_runner, forward_batch, states)

        # First forward plans the canvas itself (post-pad, inside the runner).
        out = model_runner.forward(forward_batch, pp_proxy_tensors=None)
        if all(start == self.block_size for start in start_list):
            return out.logits_output, [], None, None, out.can_run_graph

        # The canvas is fixed; later steps may reuse the plan, and re-plan
        # when DP padding reshapes the batch again.
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        for _ in range(self.max_steps(self.block_size)):
            done = self.step(forward_batch, out.logits_output.full_logits, states)
            if all(done):
                break
            self.prepare_inputs(model_runner, forward_batch, states)
            out = model_runner.forward(forward_batch, pp_proxy_tensors=None)

        next_token_ids = forward_batch.input_ids.view(batch_size, self.block_size)
        next_token_ids_list = [
            next_token_ids[i, start_list[i] :] for i in range(batch_size)
        ]
        return out.logits_output, next_token_ids_list, None, None, out.can_run_graph
