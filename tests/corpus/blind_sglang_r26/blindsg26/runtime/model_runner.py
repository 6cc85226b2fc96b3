"""Fork ModelRunner: plan-stream planning of eager decode batches."""

from __future__ import annotations

import functools
import logging
from typing import Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, PPProxyTensors
from sglang.srt.model_executor.model_runner import ModelRunner, ModelRunnerOutput

from blindsg26.common.planning import plan_and_mark, will_pad_for_dp

logger = logging.getLogger(__name__)


class ForkModelRunner(ModelRunner):
    """Plans eager decode batches before ModelRunner.forward takes them."""

    def _decode_graph_covers(self, forward_batch: ForwardBatch) -> bool:
        return bool(
            forward_batch.forward_mode.is_cuda_graph()
            and self.decode_cuda_graph_runner
            and self.decode_cuda_graph_runner.can_run_graph(forward_batch)
        )

    def _finish_eager(self, forward_batch: ForwardBatch, ret) -> ModelRunnerOutput:
        if will_pad_for_dp(forward_batch) and self.pp_group.is_last_rank:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ModelRunnerOutput(logits_output=ret, can_run_graph=False)

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner.forward (override: plan + mark, then super().forward pads in _forward_raw)
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
            forward_batch.forward_mode.is_decode()
            and forward_batch.needs_forward_metadata_init()
            and not self._decode_graph_covers(forward_batch)
        ):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return super().forward(
            forward_batch,
            skip_attn_backend_init=skip_attn_backend_init,
            pp_proxy_tensors=pp_proxy_tensors,
            reinit_attn_backend=reinit_attn_backend,
            split_forward_count=split_forward_count,
        )

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner.forward with a pre-forward planning hook (functools.partial over common.planning.plan_and_mark)
    # expect: SG106
    def forward_with_plan_hook(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        pre_forward = functools.partial(plan_and_mark, self.attn_backend)
        if not forward_batch.forward_mode.is_idle():
            pre_forward(forward_batch)
        return super().forward(forward_batch, pp_proxy_tensors=pp_proxy_tensors)

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._forward_raw (eager branch) with the plan + mark moved before _prepare_eager_forward_batch
    # expect: SG106
    def forward_decode_preplanned(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        assert forward_batch.forward_mode.is_decode()
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        self._prepare_eager_forward_batch(forward_batch)
        ret = self.eager_runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        return self._finish_eager(forward_batch, ret)

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._forward_raw (eager branch), plan before padding but mark after it
    # expect: SG106
    def forward_decode_marked_after_pad(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        assert forward_batch.forward_mode.is_decode()
        self.attn_backend.init_forward_metadata(forward_batch)
        self._prepare_eager_forward_batch(forward_batch)
        # Record the (padded) shapes so the eager runner skips re-planning.
        forward_batch.mark_forward_metadata_ready()
        ret = self.eager_runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        return self._finish_eager(forward_batch, ret)

    # idiom: sglang/srt/model_executor/forward_batch_info.py mark_forward_metadata_ready(replan_equivalent=True), then re-marked after _prepare_eager_forward_batch
    # expect: SG106
    def forward_decode_remarked(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        assert forward_batch.forward_mode.is_decode()
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        self._prepare_eager_forward_batch(forward_batch)
        # Refresh the plan record to the final shapes.
        forward_batch.mark_forward_metadata_ready()
        ret = self.eager_runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        return self._finish_eager(forward_batch, ret)

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._forward_raw (eager branch): _prepare_eager_forward_batch, then plan + mark, then eager_runner.execute
    # expect: clean
    def forward_decode_padded(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        assert forward_batch.forward_mode.is_decode()
        self._prepare_eager_forward_batch(forward_batch)
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        ret = self.eager_runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        return self._finish_eager(forward_batch, ret)

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._forward_raw (eager branch): warm pre-plan, then re-plan after _prepare_eager_forward_batch
    # expect: clean
    def forward_decode_replanned(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        assert forward_batch.forward_mode.is_decode()
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        self._prepare_eager_forward_batch(forward_batch)
        num_tokens = forward_batch.input_ids.shape[0]
        if (
            forward_batch.batch_size != forward_batch.forward_metadata_planned_bs
            or num_tokens != forward_batch.forward_metadata_planned_num_tokens
        ):
            # MLP-sync padding reshaped the batch: plan it again.
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        ret = self.eager_runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        return self._finish_eager(forward_batch, ret)


class DpSafeModelRunner(ForkModelRunner):
    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner.forward (override): pre-plan only batches that carry no MLP-sync token counts
    # expect: clean
    def forward(
        self,
        forward_batch: ForwardBatch,
        skip_attn_backend_init: Optional[bool] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        if (
            forward_batch.forward_mode.is_decode()
            and forward_batch.needs_forward_metadata_init()
            and not will_pad_for_dp(forward_batch)
            and not self._decode_graph_covers(forward_batch)
        ):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return ModelRunner.forward(
            self,
            forward_batch,
            skip_attn_backend_init=skip_attn_backend_init,
            pp_proxy_tensors=pp_proxy_tensors,
            reinit_attn_backend=reinit_attn_backend,
            split_forward_count=split_forward_count,
        )

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._prepare_eager_forward_batch (override: re-plan a stale draft-extend pre-plan right after the DP padding)
    # expect: clean
    def _prepare_eager_forward_batch(self, forward_batch: ForwardBatch) -> None:
        super()._prepare_eager_forward_batch(forward_batch)
        if (
            forward_batch.forward_metadata_ready
            and forward_batch.forward_mode.is_draft_extend_v2()
        ):
            num_tokens = (
                forward_batch.input_ids.shape[0]
                if forward_batch.input_ids is not None
                else 0
            )
            if (
                forward_batch.batch_size != forward_batch.forward_metadata_planned_bs
                or num_tokens != forward_batch.forward_metadata_planned_num_tokens
            ):
                # The pre-plan describes the unpadded batch (#27091 keeps
                # upstream from re-planning); plan the padded one here.
                self.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
