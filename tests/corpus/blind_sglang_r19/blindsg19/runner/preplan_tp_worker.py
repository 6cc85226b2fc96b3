"""TpModelWorker variants that pre-plan attention for decode batches."""

from __future__ import annotations

from typing import Optional

from sglang.srt.environ import envs
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, PPProxyTensors


class PreplanningTpModelWorker(TpModelWorker):
    # expect: SG106
    def forward_batch_generation(
        self,
        batch: Optional[ScheduleBatch],
        forward_batch: Optional[ForwardBatch] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
        is_verify: bool = False,
        skip_attn_backend_init: Optional[bool] = None,
        **kwargs,
    ) -> GenerationBatchResult:
        if (
            batch is not None
            and batch.forward_mode.is_decode()
            and envs.SGLANG_ENABLE_OVERLAP_PLAN_STREAM.get()
        ):
            forward_batch = ForwardBatch.init_new(
                batch,
                self.model_runner,
                return_hidden_states_before_norm=False,
            )
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            batch = None
        return super().forward_batch_generation(
            batch,
            forward_batch=forward_batch,
            pp_proxy_tensors=pp_proxy_tensors,
            is_verify=is_verify,
            skip_attn_backend_init=skip_attn_backend_init,
            **kwargs,
        )


class SyncAwarePreplanningTpModelWorker(TpModelWorker):
    # expect: clean
    def forward_batch_generation(
        self,
        batch: Optional[ScheduleBatch],
        forward_batch: Optional[ForwardBatch] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
        is_verify: bool = False,
        skip_attn_backend_init: Optional[bool] = None,
        **kwargs,
    ) -> GenerationBatchResult:
        if batch is not None and batch.forward_mode.is_decode():
            forward_batch = ForwardBatch.init_new(
                batch,
                self.model_runner,
                return_hidden_states_before_norm=False,
            )
            # A batch carrying DP token counts is re-padded inside forward();
            # only an unsynced, eager batch keeps the host plan.
            graph_runner = self.model_runner.decode_cuda_graph_runner
            replays = graph_runner is not None and graph_runner.can_run_graph(
                forward_batch
            )
            if forward_batch.global_num_tokens_cpu is None and not replays:
                self.model_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            batch = None
        return super().forward_batch_generation(
            batch,
            forward_batch=forward_batch,
            pp_proxy_tensors=pp_proxy_tensors,
            is_verify=is_verify,
            skip_attn_backend_init=skip_attn_backend_init,
            **kwargs,
        )
