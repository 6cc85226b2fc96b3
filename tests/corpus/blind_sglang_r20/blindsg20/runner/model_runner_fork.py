"""Fork ModelRunner: plans eager decode before upstream's forward wrappers.

Upstream wraps ``_forward_raw`` in the step span, the canary context and the
expert-distribution recorder; planning eager decode there attributes the plan
cost to the model step.  The fork plans first so the step span only measures
the model (and so the plan overlaps the previous step's sampling).
"""

from __future__ import annotations

from typing import Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, PPProxyTensors
from sglang.srt.model_executor.model_runner import ModelRunner, ModelRunnerOutput
from sglang.srt.utils.common import require_mlp_sync
from sglang.srt.utils.nvtx_utils import profile_range

from blindsg20.runner.eager_fork import PrePlanningEagerRunner


class _ForkModelRunnerBase(ModelRunner):
    def _decode_graph_can_run(self, forward_batch: ForwardBatch) -> bool:
        runner = self.decode_cuda_graph_runner
        return bool(
            forward_batch.forward_mode.is_cuda_graph()
            and runner
            and runner.can_run_graph(forward_batch)
        )

    def _wants_preplan(
        self, forward_batch: ForwardBatch, skip_attn_backend_init: Optional[bool]
    ) -> bool:
        return (
            forward_batch.forward_mode.is_decode()
            and skip_attn_backend_init is None
            and forward_batch.needs_forward_metadata_init()
            and not self._decode_graph_can_run(forward_batch)
        )


class ForkModelRunner(_ForkModelRunnerBase):
    # expect: SG106
    def forward(
        self,
        forward_batch: ForwardBatch,
        skip_attn_backend_init: Optional[bool] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        if self._wants_preplan(forward_batch, skip_attn_backend_init):
            with profile_range("fork_decode_plan"):
                self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return super().forward(
            forward_batch,
            skip_attn_backend_init=skip_attn_backend_init,
            pp_proxy_tensors=pp_proxy_tensors,
            reinit_attn_backend=reinit_attn_backend,
            split_forward_count=split_forward_count,
        )


class ReplanningModelRunner(_ForkModelRunnerBase):
    # expect: clean
    def forward(
        self,
        forward_batch: ForwardBatch,
        skip_attn_backend_init: Optional[bool] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        if self._wants_preplan(forward_batch, skip_attn_backend_init):
            with profile_range("fork_decode_plan"):
                self.attn_backend.init_forward_metadata(forward_batch)
            # Same backend the eager forward plans with: if DP padding changes
            # the batch, let the forward re-plan it.
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return super().forward(
            forward_batch,
            skip_attn_backend_init=skip_attn_backend_init,
            pp_proxy_tensors=pp_proxy_tensors,
            reinit_attn_backend=reinit_attn_backend,
            split_forward_count=split_forward_count,
        )


class SyncGuardModelRunner(_ForkModelRunnerBase):
    # expect: clean
    def forward(
        self,
        forward_batch: ForwardBatch,
        skip_attn_backend_init: Optional[bool] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        # With MLP sync the batch is padded inside _forward_raw; only plan
        # early when nothing will reshape it.
        if not require_mlp_sync() and self._wants_preplan(
            forward_batch, skip_attn_backend_init
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


class PostPadPlanningModelRunner(ModelRunner):
    """Installs the fork eager runner, which plans after DP padding."""

    def init_cuda_graphs(self, capture_decode_cuda_graph: bool = True):
        super().init_cuda_graphs(capture_decode_cuda_graph=capture_decode_cuda_graph)
        self.eager_runner = PrePlanningEagerRunner(self, run_warmup=False)
