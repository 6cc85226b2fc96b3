"""ModelRunner variants that move attention planning earlier to overlap it.

All of them keep upstream ``ModelRunner._prepare_eager_forward_batch`` (the
DP / MLP-sync pad) and the eager runner; they only change where
``attn_backend.init_forward_metadata`` runs relative to that pad.
"""

from __future__ import annotations

from typing import Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, PPProxyTensors
from sglang.srt.model_executor.model_runner import ModelRunner, ModelRunnerOutput

from blindsg10.common.gates import fork_flag


class _ForkRunnerBase(ModelRunner):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.enable_early_plan = fork_flag("SGLANG_FORK_EARLY_ATTN_PLAN", True)

    def _graph_eligible(self, forward_batch: ForwardBatch) -> bool:
        runner = self.decode_cuda_graph_runner
        return bool(
            forward_batch.forward_mode.is_cuda_graph()
            and runner
            and runner.can_run_graph(forward_batch)
        )

    def _replay_graph(self, forward_batch, pp_proxy_tensors) -> ModelRunnerOutput:
        ret = self.decode_cuda_graph_runner.execute(
            forward_batch, pp_proxy_tensors=pp_proxy_tensors
        )
        return ModelRunnerOutput(logits_output=ret, can_run_graph=True)

    def _run_eager(self, forward_batch, pp_proxy_tensors) -> ModelRunnerOutput:
        self._maybe_execute_deferred_mamba_cow_and_clear(forward_batch)
        ret = self.eager_runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        if forward_batch.global_num_tokens_cpu is not None and self.pp_group.is_last_rank:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ModelRunnerOutput(logits_output=ret, can_run_graph=False)

    def _plannable(self, forward_batch: ForwardBatch) -> bool:
        mode = forward_batch.forward_mode
        return (
            self.enable_early_plan
            and not mode.is_idle()
            and not mode.is_split_prefill()
        )


class EarlyPlanModelRunner(_ForkRunnerBase):
    """Plans eager decode as soon as the batch arrives, overlapping the
    scheduler's D2H copy of the previous step."""

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
            self.enable_early_plan
            and forward_batch.forward_mode.is_decode()
            and not self._graph_eligible(forward_batch)
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


class DpAwareEarlyPlanModelRunner(_ForkRunnerBase):
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
            self.enable_early_plan
            and forward_batch.forward_mode.is_decode()
            and forward_batch.global_num_tokens_cpu is None  # no MLP-sync pad ahead
            and not self._graph_eligible(forward_batch)
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


class OverlapPlanModelRunner(_ForkRunnerBase):
    """Starts the plan before the MLP-sync collectives so it hides behind them."""

    # expect: SG106
    def _forward_raw(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors],
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        if self._graph_eligible(forward_batch):
            return self._replay_graph(forward_batch, pp_proxy_tensors)
        early = self._plannable(forward_batch)
        if early:
            self.attn_backend.init_forward_metadata(forward_batch)
        self._prepare_eager_forward_batch(forward_batch)
        if early:
            # replan_equivalent: the eager runner re-plans if shapes drift.
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self._run_eager(forward_batch, pp_proxy_tensors)


class ReplanSafeOverlapModelRunner(_ForkRunnerBase):
    # expect: clean
    def _forward_raw(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors],
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        if self._graph_eligible(forward_batch):
            return self._replay_graph(forward_batch, pp_proxy_tensors)
        if self._plannable(forward_batch):
            self.attn_backend.init_forward_metadata(forward_batch)
            # Marked before the pad so the record holds the pre-pad shapes; the
            # eager runner re-plans when the pad changes them.
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        self._prepare_eager_forward_batch(forward_batch)
        return self._run_eager(forward_batch, pp_proxy_tensors)


class PostPadPlanModelRunner(_ForkRunnerBase):
    # expect: clean
    def _forward_raw(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors],
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        if self._graph_eligible(forward_batch):
            return self._replay_graph(forward_batch, pp_proxy_tensors)
        self._prepare_eager_forward_batch(forward_batch)
        if self._plannable(forward_batch):
            # Planned on the padded batch, on the plan stream's schedule.
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self._run_eager(forward_batch, pp_proxy_tensors)


class ReplanOnGrowModelRunner(_ForkRunnerBase):
    # expect: clean
    def _forward_raw(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors],
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        if self._graph_eligible(forward_batch):
            return self._replay_graph(forward_batch, pp_proxy_tensors)
        if not self._plannable(forward_batch):
            self._prepare_eager_forward_batch(forward_batch)
            return self._run_eager(forward_batch, pp_proxy_tensors)
        planned_bs = forward_batch.batch_size
        planned_tokens = forward_batch.input_ids.shape[0]
        self.attn_backend.init_forward_metadata(forward_batch)
        self._prepare_eager_forward_batch(forward_batch)
        if (
            forward_batch.batch_size != planned_bs
            or forward_batch.input_ids.shape[0] != planned_tokens
        ):
            # The DP pad grew the batch; the early plan is stale.
            self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self._run_eager(forward_batch, pp_proxy_tensors)


class PlanThenPadModelRunner(_ForkRunnerBase):
    # expect: SG106
    def _forward_raw(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors],
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        if self._graph_eligible(forward_batch):
            return self._replay_graph(forward_batch, pp_proxy_tensors)
        if self._plannable(forward_batch):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        # Inlined MLP-sync / attn-TP normalization (see _prepare_eager_forward_batch).
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self)
        else:
            forward_batch.prepare_attn_tp_scatter_input(self)
        if forward_batch.global_num_token_non_padded is not None:
            forward_batch.set_local_num_token_non_padded(
                sharded=forward_batch.attn_tp_sequence_sharded
            )
        return self._run_eager(forward_batch, pp_proxy_tensors)
