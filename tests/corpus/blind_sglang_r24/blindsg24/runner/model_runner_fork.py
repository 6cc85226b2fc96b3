"""ModelRunner subclass with the fork's pre-planned forward entry points.

Used by the fork's draft worker when it wants the plan on the plan stream
instead of inside ``ModelRunner.forward``.
"""

from typing import Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, PPProxyTensors
from sglang.srt.model_executor.model_runner import ModelRunner, ModelRunnerOutput
from sglang.srt.utils.common import require_mlp_sync


class PreplanModelRunner(ModelRunner):
    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner.forward (pre-planner marks, _forward_raw pads)
    # expect: SG106
    def forward_preplanned(self, forward_batch: ForwardBatch) -> ModelRunnerOutput:
        mode = forward_batch.forward_mode
        if mode.is_extend(include_draft_extend_v2=True) and not mode.is_target_verify():
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.forward(forward_batch)

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner.forward; ForwardBatch.mark_forward_metadata_ready(replan_equivalent=True)
    # expect: clean
    def forward_preplanned_replannable(
        self, forward_batch: ForwardBatch
    ) -> ModelRunnerOutput:
        mode = forward_batch.forward_mode
        if mode.is_extend(include_draft_extend_v2=True) and not mode.is_target_verify():
            self.attn_backend.init_forward_metadata(forward_batch)
            # Our own backend plans the forward path too: equivalent re-plan.
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.forward(forward_batch)

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._forward_raw (_prepare_eager_forward_batch then eager_runner.execute)
    # expect: clean
    def forward_eager_prepadded(self, forward_batch: ForwardBatch):
        self._prepare_eager_forward_batch(forward_batch)
        if not forward_batch.forward_mode.is_idle():
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        ret = self.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._forward_raw (plan hoisted above _prepare_eager_forward_batch)
    # expect: SG106
    def forward_eager_preplanned(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        self._prepare_eager_forward_batch(forward_batch)
        ret = self.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # idiom: sglang/srt/model_executor/runner/eager_runner.py EagerRunner._execute_decode (needs_forward_metadata_init gate)
    # expect: SG106
    def forward_decode_checked(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self)
        if forward_batch.needs_forward_metadata_init():
            # Stale after padding: plan again.
            self.attn_backend.init_forward_metadata(forward_batch)
        ret = self.model.forward(
            forward_batch.input_ids, forward_batch.positions, forward_batch
        )
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # idiom: sglang/srt/model_executor/runner/eager_runner.py EagerRunner._execute_decode; ForwardBatch.needs_forward_metadata_init (replan_equivalent=True)
    # expect: clean
    def forward_decode_checked_replannable(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self)
        if forward_batch.needs_forward_metadata_init():
            # Padding changed the shapes recorded at mark time: re-plan.
            self.attn_backend.init_forward_metadata(forward_batch)
        ret = self.model.forward(
            forward_batch.input_ids, forward_batch.positions, forward_batch
        )
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # idiom: sglang/srt/utils/common.py require_mlp_sync; ModelRunner._prepare_eager_forward_batch (no MLP sync -> no DP padding)
    # expect: clean
    def forward_preplanned_without_mlp_sync(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_draft_extend_v2() and not require_mlp_sync():
            # Without MLP sync the scheduler never fills global_num_tokens,
            # so the runner forwards this draft-extend batch unpadded.
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.forward(forward_batch)


class DraftDecodePreplanRunner(ModelRunner):
    """Draft-worker runner that plans draft decode itself before forwarding."""

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner.forward (override that plans draft decode first)
    # expect: SG106
    def forward(
        self,
        forward_batch: ForwardBatch,
        skip_attn_backend_init: Optional[bool] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        if (
            self.is_draft_worker
            and forward_batch.forward_mode.is_decode()
            and forward_batch.needs_forward_metadata_init()
        ):
            # Draft decode: plan here so the plan overlaps the H2D copies.
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return super().forward(
            forward_batch,
            skip_attn_backend_init=skip_attn_backend_init,
            pp_proxy_tensors=pp_proxy_tensors,
            reinit_attn_backend=reinit_attn_backend,
            split_forward_count=split_forward_count,
        )
