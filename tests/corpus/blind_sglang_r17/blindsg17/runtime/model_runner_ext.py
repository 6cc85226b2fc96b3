"""ModelRunner variants that plan attention metadata at a fixed point in
``_forward_raw`` / ``forward`` rather than inside the eager runner, so the host
work can overlap the previous step's GPU tail."""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, PPProxyTensors
from sglang.srt.model_executor.model_runner import ModelRunner, ModelRunnerOutput
from sglang.srt.runtime_context import get_parallel

logger = logging.getLogger(__name__)


def _run_eager(
    model_runner: ModelRunner,
    forward_batch: ForwardBatch,
    pp_proxy_tensors: Optional[PPProxyTensors],
):
    ret = model_runner.eager_runner.execute(
        forward_batch, pp_proxy_tensors=pp_proxy_tensors
    )
    if (
        forward_batch.global_num_tokens_cpu is not None
        and model_runner.pp_group.is_last_rank
    ):
        forward_batch.post_forward_mlp_sync_batch(ret)
    return ret


class PrePlanningModelRunner(ModelRunner):
    # expect: SG106
    def _forward_raw(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors],
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
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

        if (
            forward_batch.needs_forward_metadata_init()
            and not forward_batch.forward_mode.is_split_prefill()
        ):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        self._prepare_eager_forward_batch(forward_batch)
        self._maybe_execute_deferred_mamba_cow_and_clear(forward_batch)
        ret = _run_eager(self, forward_batch, pp_proxy_tensors)
        return ModelRunnerOutput(logits_output=ret, can_run_graph=False)


class EagerPlanModelRunner(ModelRunner):
    """Entry points used by the spec workers to run a batch they already
    built; planning is done here instead of in the worker."""

    # expect: SG106
    def forward_decode_preplanned(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        assert forward_batch.forward_mode.is_decode_or_idle()
        if not forward_batch.forward_mode.is_idle():
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.forward(forward_batch, pp_proxy_tensors=pp_proxy_tensors)

    # expect: clean
    def forward_decode_preplanned_v2(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        assert forward_batch.forward_mode.is_decode_or_idle()
        can_run_graph = bool(
            self.decode_cuda_graph_runner
            and self.decode_cuda_graph_runner.can_run_graph(forward_batch)
        )
        if (
            not forward_batch.forward_mode.is_idle()
            and not can_run_graph
            and not get_parallel().attn_dp_enabled
        ):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.forward(forward_batch, pp_proxy_tensors=pp_proxy_tensors)

    # expect: SG106
    def forward_draft_extend_eager(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ):
        assert forward_batch.forward_mode.is_draft_extend_v2()
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self)
        return _run_eager(self, forward_batch, pp_proxy_tensors)

    # expect: clean
    def forward_draft_extend_staged(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ):
        assert forward_batch.forward_mode.is_draft_extend_v2()
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self)
            padded_tokens = forward_batch.input_ids.shape[0]
            if (
                forward_batch.batch_size != forward_batch.forward_metadata_planned_bs
                or padded_tokens != forward_batch.forward_metadata_planned_num_tokens
            ):
                self.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        return _run_eager(self, forward_batch, pp_proxy_tensors)

    # expect: SG106
    def forward_detached(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        # Plan on the scheduler's batch, run a shallow copy so per-forward
        # rebinding (positions / out_cache_loc) does not leak back.
        if forward_batch.forward_mode.is_extend(include_draft_extend_v2=True):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        run_batch = dataclasses.replace(forward_batch)
        return self.forward(run_batch, pp_proxy_tensors=pp_proxy_tensors)

    # expect: clean
    def forward_detached_copy(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        if forward_batch.forward_mode.is_extend(include_draft_extend_v2=True):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        run_batch = dataclasses.replace(
            forward_batch,
            forward_metadata_ready=False,
            forward_metadata_planned_bs=None,
            forward_metadata_planned_num_tokens=None,
        )
        return self.forward(run_batch, pp_proxy_tensors=pp_proxy_tensors)

    # expect: clean
    def forward_decode_preloaded(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
    ) -> ModelRunnerOutput:
        can_run_graph = bool(
            forward_batch.forward_mode.is_cuda_graph()
            and self.decode_cuda_graph_runner
            and self.decode_cuda_graph_runner.can_run_graph(forward_batch)
        )
        if can_run_graph:
            self.decode_cuda_graph_runner.load_batch(forward_batch, pp_proxy_tensors)
            forward_batch.mark_forward_metadata_ready()
        return self.forward(forward_batch, pp_proxy_tensors=pp_proxy_tensors)


class StagedPlanningModelRunner(ModelRunner):
    # expect: clean
    def _forward_raw(
        self,
        forward_batch: ForwardBatch,
        pp_proxy_tensors: Optional[PPProxyTensors],
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
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
        self._maybe_execute_deferred_mamba_cow_and_clear(forward_batch)
        if (
            forward_batch.needs_forward_metadata_init()
            and not forward_batch.forward_mode.is_split_prefill()
        ):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        ret = _run_eager(self, forward_batch, pp_proxy_tensors)
        return ModelRunnerOutput(logits_output=ret, can_run_graph=False)


class DraftExtendPrePlanModelRunner(ModelRunner):
    """Draft runner that plans draft-extend batches before the base forward
    (keeps the plan off the canary / expert-recorder span)."""

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
            forward_batch.forward_mode.is_draft_extend_v2()
            and forward_batch.needs_forward_metadata_init()
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


class DraftExtendPlanningModelRunner(ModelRunner):
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
            forward_batch.forward_mode.is_draft_extend_v2()
            and forward_batch.needs_forward_metadata_init()
        ):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=forward_batch.global_num_tokens_cpu is not None
            )
        return super().forward(
            forward_batch,
            skip_attn_backend_init=skip_attn_backend_init,
            pp_proxy_tensors=pp_proxy_tensors,
            reinit_attn_backend=reinit_attn_backend,
            split_forward_count=split_forward_count,
        )
