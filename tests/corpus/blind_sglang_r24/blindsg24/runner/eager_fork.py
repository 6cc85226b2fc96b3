"""EagerRunner subclass: the fork's DP-attention eager entry that does its own
MLP-sync padding (it is called from a code path that bypasses
``ModelRunner._forward_raw``)."""

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.runner.eager_runner import EagerRunner


class ForkEagerRunner(EagerRunner):
    def _pad_for_dp(self, forward_batch: ForwardBatch) -> bool:
        if forward_batch.global_num_tokens_cpu is None:
            return False
        forward_batch.prepare_mlp_sync_batch(self.model_runner)
        return True

    # idiom: sglang/srt/model_executor/runner/eager_runner.py EagerRunner.execute; ForwardBatch.prepare_mlp_sync_batch after the plan
    # expect: SG106
    def execute_preplanned(self, forward_batch: ForwardBatch, pp_proxy_tensors=None):
        if not forward_batch.forward_mode.is_idle():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        padded = self._pad_for_dp(forward_batch)
        ret = self.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        if padded:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # idiom: sglang/srt/model_executor/runner/eager_runner.py EagerRunner.execute; padding before the plan
    # expect: clean
    def execute_padded_then_planned(
        self, forward_batch: ForwardBatch, pp_proxy_tensors=None
    ):
        padded = self._pad_for_dp(forward_batch)
        if not forward_batch.forward_mode.is_idle():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        ret = self.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        if padded:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # idiom: sglang/srt/model_executor/forward_batch_info.py ForwardBatch.forward_metadata_ready (cleared after padding so EagerRunner re-plans)
    # expect: clean
    def execute_unmarked_after_pad(
        self, forward_batch: ForwardBatch, pp_proxy_tensors=None
    ):
        if not forward_batch.forward_mode.is_idle():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        padded = self._pad_for_dp(forward_batch)
        if padded:
            # The pre-pad plan is stale now; hand planning back to execute().
            forward_batch.forward_metadata_ready = False
        ret = self.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        if padded:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret
