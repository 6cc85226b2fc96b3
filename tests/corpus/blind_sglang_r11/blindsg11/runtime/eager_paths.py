"""Hand-driven eager draft step, bypassing ModelRunner.forward.

ModelRunner.forward carries step-span / canary / expert-recorder bookkeeping
that the offline draft-quality harness does not want, so it drives the eager
runner directly and does the MLP-sync padding itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner


class DraftStepExecutor:
    def __init__(self, model_runner: "ModelRunner", attn_backend) -> None:
        self.model_runner = model_runner
        self.attn_backend = attn_backend

    def _execute(self, forward_batch: ForwardBatch):
        with forward_context(
            ForwardContext(attn_backend=self.attn_backend),
            forward_batch=forward_batch,
        ):
            out = self.model_runner.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(out)
        return out

    # expect: SG106
    def run_decode_step(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self.model_runner)
        return self._execute(forward_batch)

    # expect: clean
    def run_decode_step_padded_first(self, forward_batch: ForwardBatch):
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self.model_runner)
        if not forward_batch.forward_mode.is_idle():
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self._execute(forward_batch)
