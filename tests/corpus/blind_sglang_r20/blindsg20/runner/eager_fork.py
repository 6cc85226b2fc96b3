"""Fork EagerRunner.

``ModelRunner._forward_raw`` applies DP / MLP-sync padding
(``_prepare_eager_forward_batch``) before it dispatches to the eager runner,
so anything planned inside ``EagerRunner.execute`` sees the final shapes.
"""

from __future__ import annotations

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.runner.eager_runner import EagerRunner
from sglang.srt.utils.device_timer import device_timer_ctx


class PrePlanningEagerRunner(EagerRunner):
    """Plans eager decode before the decode device timer starts, so the
    fork's per-step latency export excludes host-side planning."""

    # expect: clean
    def execute(self, forward_batch: ForwardBatch, pp_proxy_tensors=None, **kwargs):
        if (
            forward_batch.forward_mode.is_decode()
            and not self.enable_pdmux
            and forward_batch.needs_forward_metadata_init()
        ):
            with device_timer_ctx(self.model_runner.device_timer, "decode_plan"):
                self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return super().execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors, **kwargs)
