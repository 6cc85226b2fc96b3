"""ModelRunner / EagerRunner overrides that move attention planning earlier
in the step to overlap it with the DP-attention MLP-sync all-gather."""

from __future__ import annotations

import logging
from typing import Optional, Union

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, PPProxyTensors
from sglang.srt.model_executor.forward_context import (
    forward_context,
    get_forward_context,
)
from sglang.srt.model_executor.model_runner import ModelRunner, ModelRunnerOutput
from sglang.srt.model_executor.runner.eager_runner import EagerRunner

logger = logging.getLogger(__name__)


class _RawForwardMixin(ModelRunner):
    def _try_decode_graph(
        self, forward_batch: ForwardBatch, pp_proxy_tensors
    ) -> Optional[ModelRunnerOutput]:
        can_run_graph = bool(
            forward_batch.forward_mode.is_cuda_graph()
            and self.decode_cuda_graph_runner
            and self.decode_cuda_graph_runner.can_run_graph(forward_batch)
        )
        if not can_run_graph:
            return None
        ret = self.decode_cuda_graph_runner.execute(
            forward_batch, pp_proxy_tensors=pp_proxy_tensors
        )
        return ModelRunnerOutput(logits_output=ret, can_run_graph=True)

    def _finish_eager(self, forward_batch: ForwardBatch, ret) -> ModelRunnerOutput:
        if forward_batch.global_num_tokens_cpu is not None and self.pp_group.is_last_rank:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ModelRunnerOutput(logits_output=ret, can_run_graph=False)


class OverlapPlanModelRunner(_RawForwardMixin):
    """Plans while the MLP-sync gather is still in flight."""

    # expect: SG106
    def _forward_raw(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors],
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        graph_out = self._try_decode_graph(forward_batch, pp_proxy_tensors)
        if graph_out is not None:
            return graph_out

        if (
            forward_batch.needs_forward_metadata_init()
            and not forward_batch.forward_mode.is_idle()
        ):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        self._prepare_eager_forward_batch(forward_batch)
        ret = self.eager_runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        return self._finish_eager(forward_batch, ret)


class PadThenPlanModelRunner(_RawForwardMixin):
    """Same early plan, but after the DP padding has been applied."""

    # expect: clean
    def _forward_raw(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors],
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        graph_out = self._try_decode_graph(forward_batch, pp_proxy_tensors)
        if graph_out is not None:
            return graph_out

        self._prepare_eager_forward_batch(forward_batch)

        if (
            forward_batch.needs_forward_metadata_init()
            and not forward_batch.forward_mode.is_idle()
        ):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        ret = self.eager_runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        return self._finish_eager(forward_batch, ret)


class RunnerSyncModelRunner(ModelRunner):
    """Leaves the DP MLP-sync padding to the eager runner below, so that the
    runner can overlap it with planning."""

    def _prepare_eager_forward_batch(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.global_num_tokens_cpu is None:
            forward_batch.prepare_attn_tp_scatter_input(self)
        if self.lora_manager is not None and self.lora_manager.attn_dp_enabled:
            self.lora_manager.prepare_lora_batch(forward_batch)


class PlanAheadEagerRunner(EagerRunner):
    """Eager decode that plans first and syncs the DP batch itself (paired
    with RunnerSyncModelRunner, which skips its own MLP-sync pass)."""

    # expect: SG106
    def _execute_decode(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors=None,
    ) -> Union[LogitsProcessorOutput, PPProxyTensors]:
        model_runner = self.model_runner
        attn_backend = model_runner.attn_backend
        if forward_batch.needs_forward_metadata_init():
            attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(model_runner)

        forward_batch = self.load_batch(forward_batch, pp_proxy_tensors)
        if forward_batch.needs_forward_metadata_init():
            attn_backend.init_forward_metadata(forward_batch)

        kwargs = model_runner._pp_kwargs(pp_proxy_tensors)
        with forward_context(get_forward_context(), forward_batch=forward_batch):
            return model_runner.model.forward(
                forward_batch.input_ids,
                forward_batch.positions,
                forward_batch,
                **kwargs,
            )


class ReplanEagerRunner(EagerRunner):
    # expect: clean
    def _execute_decode(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors=None,
    ) -> Union[LogitsProcessorOutput, PPProxyTensors]:
        model_runner = self.model_runner
        attn_backend = model_runner.attn_backend
        padded = False
        if forward_batch.needs_forward_metadata_init():
            attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(model_runner)
            padded = True

        forward_batch = self.load_batch(forward_batch, pp_proxy_tensors)
        if padded or forward_batch.needs_forward_metadata_init():
            # The pre-plan described the unpadded batch.
            attn_backend.init_forward_metadata(forward_batch)

        kwargs = model_runner._pp_kwargs(pp_proxy_tensors)
        with forward_context(get_forward_context(), forward_batch=forward_batch):
            return model_runner.model.forward(
                forward_batch.input_ids,
                forward_batch.positions,
                forward_batch,
                **kwargs,
            )
