"""Model-runner side of the fork's pre-planning support."""

from __future__ import annotations

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner


class PreplanModelRunner(ModelRunner):
    # expect: SG106
    def forward_preplanned(self, forward_batch: ForwardBatch):
        assert (
            forward_batch.global_num_tokens_cpu is not None
        ), "pre-planned forwards are only used on DP-attention ranks"
        if not forward_batch.forward_mode.is_idle():
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.forward(forward_batch)

    # expect: clean
    def forward_padded_direct(self, forward_batch: ForwardBatch):
        assert forward_batch.global_num_tokens_cpu is not None
        forward_batch.prepare_mlp_sync_batch(self)
        if not forward_batch.forward_mode.is_idle():
            self.attn_backend.init_forward_metadata(forward_batch)
        ret = self.model.forward(
            forward_batch.input_ids, forward_batch.positions, forward_batch
        )
        forward_batch.post_forward_mlp_sync_batch(ret)
        return ret


class PreplannedStepper:
    """Plans a batch on a side stream, then forwards it through the runner."""

    def __init__(self, model_runner: ModelRunner):
        self.model_runner = model_runner

    @property
    def backend(self):
        return self.model_runner.attn_backend

    def _mark(self, forward_batch: ForwardBatch) -> None:
        # Same backend object as the forward path: a post-pad re-plan is
        # equivalent, so opt in.
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)

    # expect: clean
    def run(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.backend.init_forward_metadata(forward_batch)
            self._mark(forward_batch)
        return self.model_runner.forward(forward_batch)


class DSAPreplannedStepper(PreplannedStepper):
    """DSA's indexer cannot rebuild its schedule on a DP-padded batch, so the
    pre-plan must never be replaced by the forward path."""

    def _mark(self, forward_batch: ForwardBatch) -> None:
        forward_batch.mark_forward_metadata_ready()

    # expect: SG106
    def run_dp(self, batch: ScheduleBatch, forward_batch: ForwardBatch):
        forward_batch.init_mlp_sync_metadata(batch, self.model_runner.device)
        return self.run(forward_batch)

    # expect: clean
    def run_rank_local(self, forward_batch: ForwardBatch):
        # Rank-local warmup batch: never synchronised across DP ranks.
        forward_batch.global_num_tokens_cpu = None
        forward_batch.global_num_tokens_gpu = None
        return self.run(forward_batch)
