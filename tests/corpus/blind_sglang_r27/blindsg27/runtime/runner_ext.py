"""ModelRunner extension used by the lookahead draft workers.

The draft workers hand the runner batches they have already planned (plan
stream, hand-built spec batches).  These entry points take care of the
planning marker around ``ModelRunner.forward``.
"""

from __future__ import annotations

from typing import Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner, ModelRunnerOutput
from sglang.srt.utils.common import require_mlp_sync

from blindsg27.runtime import eager as eager_utils
from blindsg27.runtime.eager import forward_prepadded, pad_for_dp, replan_if_padded


class SpecModelRunner(ModelRunner):
    """ModelRunner with pre-planned entry points for speculative batches."""

    # idiom: model_runner.ModelRunner.forward called on a batch planned and marked by its caller
    # expect: SG106
    def forward_preplanned(
        self, forward_batch: ForwardBatch, attn_backend=None
    ) -> ModelRunnerOutput:
        backend = attn_backend if attn_backend is not None else self.attn_backend
        if not forward_batch.forward_mode.is_idle():
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.forward(forward_batch)

    # idiom: model_runner.ModelRunner._forward_raw (pad with prepare_mlp_sync_batch first, then plan the padded batch)
    # expect: clean
    def forward_preplanned_padded(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.forward(forward_batch).logits_output
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self)
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return forward_prepadded(self, forward_batch)

    # idiom: model_runner.ModelRunner.forward(reinit_attn_backend=True) on a marked decode batch
    # expect: SG106
    def forward_with_reinit(self, forward_batch: ForwardBatch) -> ModelRunnerOutput:
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        # reinit_attn_backend asks the runner to plan again.
        return self.forward(forward_batch, reinit_attn_backend=True)

    # idiom: forward_batch_info.ForwardBatch.forward_metadata_ready (drop the pre-plan mark when MLP sync pads)
    # expect: clean
    def forward_unmark_for_dp(self, forward_batch: ForwardBatch) -> ModelRunnerOutput:
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if require_mlp_sync():
            # The pre-plan describes the unpadded batch; let _forward_raw plan
            # after prepare_mlp_sync_batch.
            forward_batch.forward_metadata_ready = False
        return self.forward(forward_batch)

    # idiom: forward_batch_info.ForwardBatch.needs_forward_metadata_init (re-plan after padding when the shapes moved)
    # expect: clean
    def forward_padded_then_replan(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if pad_for_dp(self, forward_batch):
            replan_if_padded(self.attn_backend, forward_batch)
        return forward_prepadded(self, forward_batch)

    # idiom: forward_batch_info.ForwardBatch.mark_forward_metadata_ready(replan_equivalent=True) recorded after prepare_mlp_sync_batch
    # expect: SG106
    def forward_padded_stale_record(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        padded = pad_for_dp(self, forward_batch)
        # Re-plannable mark: the runner plans again if the shapes change.
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        if padded:
            return forward_prepadded(self, forward_batch)
        return self.forward(forward_batch).logits_output

    # idiom: forward_batch_info.ForwardBatch.needs_forward_metadata_init (replan_equivalent mark made before prepare_mlp_sync_batch)
    # expect: clean
    def forward_marked_then_padded(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        eager_utils.pad_for_dp(self, forward_batch)
        return eager_utils.forward_prepadded(self, forward_batch)

    # idiom: runner/eager_runner.EagerRunner._execute_decode after an explicit prepare_mlp_sync_batch
    # expect: SG106
    def forward_marked_then_padded_decode(
        self, forward_batch: ForwardBatch, attn_backend: Optional[object] = None
    ):
        backend = attn_backend or self.attn_backend
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self)
        return forward_prepadded(self, forward_batch, attn_backend=backend)
