"""ModelRunner / EagerRunner overrides from the inference-platform fork.

Most of these exist to overlap attention planning with the DP token-count
all-gather, or to keep per-rank token counts aligned for the SP
reduce-scatter.
"""

from __future__ import annotations

from typing import Optional, Tuple

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, PPProxyTensors
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.model_executor.model_runner import ModelRunner, ModelRunnerOutput
from sglang.srt.model_executor.runner import EagerRunner

from blindsg1._dp_utils import align_tokens_to_attn_tp, lockstep, sync_batch_across_dp


class OverlapPlanModelRunner(ModelRunner):
    # expect: SG106
    def _forward_raw(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors],
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        with forward_context(
            ForwardContext(attn_backend=self.attn_backend),
            forward_batch=forward_batch,
        ):
            can_run_graph = bool(
                forward_batch.forward_mode.is_cuda_graph()
                and self.decode_cuda_graph_runner
                and self.decode_cuda_graph_runner.can_run_graph(forward_batch)
            )
            if can_run_graph:
                ret = self.decode_cuda_graph_runner.execute(
                    forward_batch, pp_proxy_tensors=pp_proxy_tensors
                )
                return ModelRunnerOutput(logits_output=ret, can_run_graph=True)

            # Plan while the token-count all-gather is still in flight.
            if (
                not forward_batch.forward_mode.is_idle()
                and forward_batch.needs_forward_metadata_init()
            ):
                self.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()

            self._prepare_eager_forward_batch(forward_batch)
            ret = self.eager_runner.execute(
                forward_batch, pp_proxy_tensors=pp_proxy_tensors
            )
            if (
                forward_batch.global_num_tokens_cpu is not None
                and self.pp_group.is_last_rank
            ):
                forward_batch.post_forward_mlp_sync_batch(ret)
            return ModelRunnerOutput(logits_output=ret, can_run_graph=False)


class AllGatherOverlapModelRunner(ModelRunner):
    # expect: clean
    def _forward_raw(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors],
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        with forward_context(
            ForwardContext(attn_backend=self.attn_backend),
            forward_batch=forward_batch,
        ):
            can_run_graph = bool(
                forward_batch.forward_mode.is_cuda_graph()
                and self.decode_cuda_graph_runner
                and self.decode_cuda_graph_runner.can_run_graph(forward_batch)
            )
            if can_run_graph:
                ret = self.decode_cuda_graph_runner.execute(
                    forward_batch, pp_proxy_tensors=pp_proxy_tensors
                )
                return ModelRunnerOutput(logits_output=ret, can_run_graph=True)

            self._prepare_eager_forward_batch(forward_batch)
            if (
                not forward_batch.forward_mode.is_idle()
                and forward_batch.needs_forward_metadata_init()
            ):
                self.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            ret = self.eager_runner.execute(
                forward_batch, pp_proxy_tensors=pp_proxy_tensors
            )
            if (
                forward_batch.global_num_tokens_cpu is not None
                and self.pp_group.is_last_rank
            ):
                forward_batch.post_forward_mlp_sync_batch(ret)
            return ModelRunnerOutput(logits_output=ret, can_run_graph=False)


class SPAlignedEagerRunner(EagerRunner):
    """Decode under attn-TP sequence sharding: every rank's token count must
    divide attn_tp_size before the reduce-scatter."""

    # expect: SG106
    def _execute_decode(self, forward_batch: ForwardBatch, pp_proxy_tensors=None):
        model_runner = self.model_runner
        attn_backend, pdmux_ctx = self._resolve_decode_pdmux()
        if forward_batch.needs_forward_metadata_init():
            attn_backend.init_forward_metadata(forward_batch)
        if forward_batch.attn_tp_sequence_sharded:
            align_tokens_to_attn_tp(forward_batch, model_runner)
        kwargs = model_runner._pp_kwargs(pp_proxy_tensors)
        with pdmux_ctx:
            return model_runner.model.forward(
                forward_batch.input_ids,
                forward_batch.positions,
                forward_batch,
                **kwargs,
            )


class SPTileEagerRunner(EagerRunner):
    # expect: clean
    def _execute_decode(self, forward_batch: ForwardBatch, pp_proxy_tensors=None):
        model_runner = self.model_runner
        attn_backend, pdmux_ctx = self._resolve_decode_pdmux()
        padded = False
        if forward_batch.attn_tp_sequence_sharded:
            before = forward_batch.input_ids.shape[0]
            padded = align_tokens_to_attn_tp(forward_batch, model_runner) != before
        if padded or forward_batch.needs_forward_metadata_init():
            attn_backend.init_forward_metadata(forward_batch)
        kwargs = model_runner._pp_kwargs(pp_proxy_tensors)
        with pdmux_ctx:
            return model_runner.model.forward(
                forward_batch.input_ids,
                forward_batch.positions,
                forward_batch,
                **kwargs,
            )


class StatefulModelRunner(ModelRunner):
    """Splits planning from execution so the scheduler can plan batch N+1
    while batch N is still on the GPU."""

    _metadata_is_fresh: bool = False

    def prepare_step(self, forward_batch: ForwardBatch) -> None:
        if not forward_batch.forward_mode.is_idle():
            self.attn_backend.init_forward_metadata(forward_batch)
            self._metadata_is_fresh = True

    def forward_step(self, forward_batch: ForwardBatch, pp_proxy_tensors=None):
        sync_batch_across_dp(forward_batch, self)
        if not self._metadata_is_fresh:
            self.attn_backend.init_forward_metadata(forward_batch)
        self._metadata_is_fresh = False
        return self.model.forward(
            forward_batch.input_ids,
            forward_batch.positions,
            forward_batch,
            **self._pp_kwargs(pp_proxy_tensors),
        )

    # expect: SG106
    def step(self, forward_batch: ForwardBatch, pp_proxy_tensors=None):
        self.prepare_step(forward_batch)
        return self.forward_step(forward_batch, pp_proxy_tensors)


class PipelinedModelRunner(StatefulModelRunner):
    def forward_step(self, forward_batch: ForwardBatch, pp_proxy_tensors=None):
        shape_before = (forward_batch.batch_size, forward_batch.input_ids.shape[0])
        sync_batch_across_dp(forward_batch, self)
        if shape_before != (forward_batch.batch_size, forward_batch.input_ids.shape[0]):
            self._metadata_is_fresh = False
        if not self._metadata_is_fresh:
            self.attn_backend.init_forward_metadata(forward_batch)
        self._metadata_is_fresh = False
        return self.model.forward(
            forward_batch.input_ids,
            forward_batch.positions,
            forward_batch,
            **self._pp_kwargs(pp_proxy_tensors),
        )

    # expect: clean
    def step(self, forward_batch: ForwardBatch, pp_proxy_tensors=None):
        self.prepare_step(forward_batch)
        return self.forward_step(forward_batch, pp_proxy_tensors)


class PdmuxModelRunner(ModelRunner):
    """PD-multiplexing: decode runs on whichever stream's backend is active."""

    @property
    def active_decode_backend(self):
        if getattr(self, "decode_attn_backend", None) is not None:
            return self.decode_attn_backend
        return self.attn_backend

    # expect: SG106
    def forward_decode_pdmux(
        self, forward_batch: ForwardBatch, pp_proxy_tensors=None
    ) -> LogitsProcessorOutput:
        backend = self.active_decode_backend
        backend.init_forward_metadata(forward_batch)
        sync_batch_across_dp(forward_batch, self)
        with forward_context(
            ForwardContext(attn_backend=backend), forward_batch=forward_batch
        ):
            return self.model.forward(
                forward_batch.input_ids,
                forward_batch.positions,
                forward_batch,
                **self._pp_kwargs(pp_proxy_tensors),
            )


class PlanCacheModelRunner(ModelRunner):
    _planned_shape: Optional[Tuple[int, int]] = None

    @property
    def planned_shape(self) -> Optional[Tuple[int, int]]:
        return self._planned_shape

    def plan_ahead(self, forward_batch: ForwardBatch) -> None:
        self.attn_backend.init_forward_metadata(forward_batch)
        self._planned_shape = (
            forward_batch.batch_size,
            forward_batch.input_ids.shape[0],
        )

    # expect: clean
    def step(self, forward_batch: ForwardBatch, pp_proxy_tensors=None):
        self.plan_ahead(forward_batch)
        lockstep(forward_batch, self)
        live = (forward_batch.batch_size, forward_batch.input_ids.shape[0])
        if self.planned_shape != live:
            self.plan_ahead(forward_batch)
        with forward_context(
            ForwardContext(attn_backend=self.attn_backend), forward_batch=forward_batch
        ):
            return self.model.forward(
                forward_batch.input_ids,
                forward_batch.positions,
                forward_batch,
                **self._pp_kwargs(pp_proxy_tensors),
            )


class SplitPrefillModelRunner(ModelRunner):
    # expect: SG106
    def forward_split_prefill(
        self,
        forward_batch: ForwardBatch,
        reinit_attn_backend: bool = False,
        forward_count: int = 1,
    ) -> LogitsProcessorOutput:
        if forward_batch.split_index == 0 or reinit_attn_backend:
            self.attn_backend.init_forward_metadata(forward_batch)
        if forward_batch.split_index == 0 and forward_batch.attn_tp_sequence_sharded:
            # Split prefill is dispatched per layer-chunk; align once on entry.
            align_tokens_to_attn_tp(forward_batch, self)
        next_split_index = min(
            forward_batch.split_index + forward_count,
            self.model_config.num_hidden_layers,
        )
        ret = self.model.forward_split_prefill(
            forward_batch.input_ids,
            forward_batch.positions,
            forward_batch,
            (forward_batch.split_index, next_split_index),
        )
        forward_batch.split_index = next_split_index
        return ret


class LayerChunkModelRunner(ModelRunner):
    # expect: clean
    def forward_split_prefill(
        self,
        forward_batch: ForwardBatch,
        reinit_attn_backend: bool = False,
        forward_count: int = 1,
    ) -> LogitsProcessorOutput:
        if forward_batch.split_index == 0 and forward_batch.attn_tp_sequence_sharded:
            align_tokens_to_attn_tp(forward_batch, self)
        if forward_batch.split_index == 0 or reinit_attn_backend:
            self.attn_backend.init_forward_metadata(forward_batch)
        next_split_index = min(
            forward_batch.split_index + forward_count,
            self.model_config.num_hidden_layers,
        )
        ret = self.model.forward_split_prefill(
            forward_batch.input_ids,
            forward_batch.positions,
            forward_batch,
            (forward_batch.split_index, next_split_index),
        )
        forward_batch.split_index = next_split_index
        return ret


# expect: SG106
def forward_with_legacy_flag(
    model_runner: ModelRunner, forward_batch: ForwardBatch, *, plan_early: bool = True
):
    """Bridge for callers still on the pre-0.5.18 ``skip_attn_backend_init``
    contract."""
    if plan_early and not forward_batch.forward_mode.is_idle():
        model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.apply_deprecated_skip_attn_backend_init(True)
    sync_batch_across_dp(forward_batch, model_runner)
    return model_runner.forward(forward_batch)


# expect: clean
def bridge_legacy_skip_flag(
    model_runner: ModelRunner, forward_batch: ForwardBatch, *, plan_early: bool = True
):
    planned_tokens = None
    if plan_early and not forward_batch.forward_mode.is_idle():
        model_runner.attn_backend.init_forward_metadata(forward_batch)
        planned_tokens = forward_batch.input_ids.shape[0]
    sync_batch_across_dp(forward_batch, model_runner)
    if planned_tokens is not None:
        if forward_batch.input_ids.shape[0] != planned_tokens:
            model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.apply_deprecated_skip_attn_backend_init(True)
    return model_runner.forward(forward_batch)


# expect: SG106
def forward_premarked(model_runner: ModelRunner, forward_batch: ForwardBatch):
    model_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.forward_metadata_ready = True
    lockstep(forward_batch, model_runner)
    return model_runner.forward(forward_batch)


# expect: clean
def forward_marked(model_runner: ModelRunner, forward_batch: ForwardBatch):
    sync_batch_across_dp(forward_batch, model_runner)
    model_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.forward_metadata_ready = True
    return model_runner.forward(forward_batch)
