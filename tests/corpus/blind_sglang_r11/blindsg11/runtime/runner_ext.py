"""ModelRunner variants that plan decode attention before entering forward.

Planning outside ``_forward_raw`` lets the plan overlap with the previous
step's sampling on the host. Enabled with ``enable_eager_preplan()``.
"""

from __future__ import annotations

from typing import Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, PPProxyTensors
from sglang.srt.model_executor.model_runner import ModelRunner


class PrePlanningModelRunner(ModelRunner):
    _eager_preplan: bool = False

    def enable_eager_preplan(self, enabled: bool = True) -> None:
        self._eager_preplan = enabled

    def _replays_decode_graph(self, forward_batch: ForwardBatch) -> bool:
        # Graph replay plans inside load_batch; only the eager path is ours.
        runner = self.decode_cuda_graph_runner
        return bool(
            forward_batch.forward_mode.is_cuda_graph()
            and runner is not None
            and runner.can_run_graph(forward_batch)
        )

    # expect: SG106
    def forward(
        self,
        forward_batch: ForwardBatch,
        skip_attn_backend_init: Optional[bool] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ):
        if (
            self._eager_preplan
            and forward_batch.forward_mode.is_decode()
            and not self._replays_decode_graph(forward_batch)
            and not forward_batch.forward_metadata_ready
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


class SyncAwarePrePlanningModelRunner(ModelRunner):
    _eager_preplan: bool = False

    def enable_eager_preplan(self, enabled: bool = True) -> None:
        self._eager_preplan = enabled

    def _replays_decode_graph(self, forward_batch: ForwardBatch) -> bool:
        # Graph replay plans inside load_batch; only the eager path is ours.
        runner = self.decode_cuda_graph_runner
        return bool(
            forward_batch.forward_mode.is_cuda_graph()
            and runner is not None
            and runner.can_run_graph(forward_batch)
        )

    # expect: clean
    def forward(
        self,
        forward_batch: ForwardBatch,
        skip_attn_backend_init: Optional[bool] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ):
        # global_num_tokens_cpu is only set for MLP-sync batches; those get
        # padded in _prepare_eager_forward_batch, so they must plan there.
        if (
            self._eager_preplan
            and forward_batch.forward_mode.is_decode()
            and not self._replays_decode_graph(forward_batch)
            and forward_batch.global_num_tokens_cpu is None
            and not forward_batch.forward_metadata_ready
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


class ReplanAfterPadModelRunner(ModelRunner):
    """Pre-plans like PrePlanningModelRunner, and repairs the plan when the
    MLP-sync padding grows the batch."""

    _eager_preplan: bool = False

    def enable_eager_preplan(self, enabled: bool = True) -> None:
        self._eager_preplan = enabled

    def _replays_decode_graph(self, forward_batch: ForwardBatch) -> bool:
        # Graph replay plans inside load_batch; only the eager path is ours.
        runner = self.decode_cuda_graph_runner
        return bool(
            forward_batch.forward_mode.is_cuda_graph()
            and runner is not None
            and runner.can_run_graph(forward_batch)
        )

    # expect: clean
    def forward(
        self,
        forward_batch: ForwardBatch,
        skip_attn_backend_init: Optional[bool] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ):
        if (
            self._eager_preplan
            and forward_batch.forward_mode.is_decode()
            and not self._replays_decode_graph(forward_batch)
            and not forward_batch.forward_metadata_ready
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

    # expect: clean
    def _prepare_eager_forward_batch(self, forward_batch: ForwardBatch) -> None:
        planned_bs = (
            forward_batch.forward_metadata_planned_bs
            if forward_batch.forward_metadata_ready
            else None
        )
        super()._prepare_eager_forward_batch(forward_batch)
        if planned_bs is not None and forward_batch.batch_size != planned_bs:
            # MLP-sync padding added requests after our pre-plan: plan again
            # for the padded batch (the mark stays, so eager won't re-plan).
            self.attn_backend.init_forward_metadata(forward_batch)
