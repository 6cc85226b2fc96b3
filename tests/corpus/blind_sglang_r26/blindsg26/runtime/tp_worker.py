"""Fork TpModelWorker: eager decode batches are planned before the forward."""

from __future__ import annotations

import logging
from typing import Optional

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, PPProxyTensors

logger = logging.getLogger(__name__)


class ForkTpModelWorker(TpModelWorker):
    def _graph_covers(self, forward_batch: ForwardBatch) -> bool:
        runner = self.model_runner.decode_cuda_graph_runner
        return bool(runner is not None and runner.can_run_graph(forward_batch))

    # idiom: sglang/srt/managers/tp_worker.py TpModelWorker.forward_batch_generation (override: ForwardBatch.init_new + plan + mark, then super())
    # expect: SG106
    def forward_batch_generation(
        self,
        batch: Optional[ScheduleBatch],
        forward_batch: Optional[ForwardBatch] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
        is_verify: bool = False,
        skip_attn_backend_init: Optional[bool] = None,
        *,
        capture_hidden_mode=None,
        return_kv_loc_plan: bool = False,
    ):
        if (
            batch is not None
            and batch.forward_mode.is_decode()
            and capture_hidden_mode is None
            and not self.is_dllm()
        ):
            self.set_hicache_consumer(batch.hicache_consumer_index)
            forward_batch = ForwardBatch.init_new(
                batch, self.model_runner, return_hidden_states_before_norm=False
            )
            if not self._graph_covers(forward_batch):
                self.model_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            batch = None
        return super().forward_batch_generation(
            batch,
            forward_batch,
            pp_proxy_tensors,
            is_verify,
            skip_attn_backend_init,
            capture_hidden_mode=capture_hidden_mode,
            return_kv_loc_plan=return_kv_loc_plan,
        )


class DpSafeTpModelWorker(ForkTpModelWorker):
    # idiom: sglang/srt/managers/tp_worker.py TpModelWorker.forward_batch_generation (override): pre-plan only where no MLP-sync padding follows
    # expect: clean
    def forward_batch_generation(
        self,
        batch: Optional[ScheduleBatch],
        forward_batch: Optional[ForwardBatch] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
        is_verify: bool = False,
        skip_attn_backend_init: Optional[bool] = None,
        *,
        capture_hidden_mode=None,
        return_kv_loc_plan: bool = False,
    ):
        if (
            batch is not None
            and batch.forward_mode.is_decode()
            and capture_hidden_mode is None
            and not self.is_dllm()
        ):
            self.set_hicache_consumer(batch.hicache_consumer_index)
            forward_batch = ForwardBatch.init_new(
                batch, self.model_runner, return_hidden_states_before_norm=False
            )
            if (
                forward_batch.global_num_tokens_cpu is None
                and not self._graph_covers(forward_batch)
            ):
                self.model_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            batch = None
        return TpModelWorker.forward_batch_generation(
            self,
            batch,
            forward_batch,
            pp_proxy_tensors,
            is_verify,
            skip_attn_backend_init,
            capture_hidden_mode=capture_hidden_mode,
            return_kv_loc_plan=return_kv_loc_plan,
        )
