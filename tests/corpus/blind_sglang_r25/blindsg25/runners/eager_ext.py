"""EagerRunner subclass: plans decode metadata in the runner for pdmux-free decode."""

from __future__ import annotations

from typing import Any

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.runner.eager_runner import EagerRunner


class ForkEagerRunner(EagerRunner):
    def __init__(self, model_runner, *, run_warmup: bool = True) -> None:
        super().__init__(model_runner, run_warmup=run_warmup)
        self.preplan_decode_in_runner = not self.enable_pdmux

    def execute(self, forward_batch: ForwardBatch, pp_proxy_tensors=None, **kwargs) -> Any:
        # idiom: model_executor/runner/eager_runner.py EagerRunner.execute/_execute_decode (plan inside the runner)
        # expect: clean
        if (
            self.preplan_decode_in_runner
            and forward_batch.forward_mode.is_decode()
            and forward_batch.needs_forward_metadata_init()
        ):
            # ModelRunner._forward_raw already ran the MLP-sync padding before
            # dispatching here, so this plans the final batch.
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return super().execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors, **kwargs)

    def execute_padded(self, forward_batch: ForwardBatch, pp_proxy_tensors=None) -> Any:
        # idiom: model_executor/model_runner.py ModelRunner._forward_raw (_prepare_eager_forward_batch then eager execute)
        # expect: SG106
        model_runner = self.model_runner
        if forward_batch.forward_mode.is_decode():
            model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        # Standalone entry (no ModelRunner.forward): pad for MLP sync here.
        model_runner._prepare_eager_forward_batch(forward_batch)
        ret = super().execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret
