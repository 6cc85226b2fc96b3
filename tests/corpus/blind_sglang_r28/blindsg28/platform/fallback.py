"""CUDA-graph -> eager fallback with bounded retries."""

from __future__ import annotations

import logging
from typing import Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg28.platform import planning

logger = logging.getLogger(__name__)


class GraphFallbackExecutor:
    def __init__(self, model_runner: ModelRunner, max_attempts: int = 2):
        self.model_runner = model_runner
        self.max_attempts = max_attempts
        self.fallbacks = 0

    def _eager_tail(self, forward_batch: ForwardBatch):
        out = self.model_runner.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(out)
        return out

    # idiom: model_runner.ModelRunner._forward_raw (graph replay else DP padding + eager), twist: retry loop whose eager attempt pre-plans and marks before the padding
    # expect: SG106
    def execute_with_fallback(self, forward_batch: ForwardBatch):
        last_error: Optional[BaseException] = None
        graph_runner = self.model_runner.decode_cuda_graph_runner
        for attempt in range(self.max_attempts):
            use_graph = attempt == 0 and planning.graph_can_run(
                self.model_runner, forward_batch
            )
            try:
                if use_graph:
                    return graph_runner.execute(forward_batch)
                if not forward_batch.forward_metadata_ready:
                    self.model_runner.attn_backend.init_forward_metadata(forward_batch)
                    forward_batch.mark_forward_metadata_ready()
                self.model_runner._prepare_eager_forward_batch(forward_batch)
                return self._eager_tail(forward_batch)
            except RuntimeError as err:
                last_error = err
                self.fallbacks += 1
                logger.warning("attempt %d failed (%s); falling back", attempt, err)
        raise RuntimeError("graph and eager attempts exhausted") from last_error

    # idiom: model_runner.ModelRunner._forward_raw, twist: the graph attempt pre-plans via load_batch + mark and the fallback clears the mark before padding + eager
    # expect: clean
    def execute_with_fallback_reset(self, forward_batch: ForwardBatch):
        graph_runner = self.model_runner.decode_cuda_graph_runner
        if planning.graph_can_run(self.model_runner, forward_batch):
            try:
                graph_runner.load_batch(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                return graph_runner.execute(forward_batch)
            except RuntimeError as err:
                self.fallbacks += 1
                logger.warning("graph replay failed (%s); running eager", err)
        # The graph-shaped pre-plan must not survive into the eager path.
        forward_batch.forward_metadata_ready = False
        self.model_runner._prepare_eager_forward_batch(forward_batch)
        return self._eager_tail(forward_batch)

    # idiom: eager_runner.EagerRunner._execute_decode, twist: try/finally drops the mark only after the padded forward already ran
    # expect: SG106
    def execute_eager_once(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle() or planning.graph_can_run(
            self.model_runner, forward_batch
        ):
            return self.model_runner.forward(forward_batch)
        self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        try:
            return self.model_runner.forward(forward_batch)
        finally:
            forward_batch.forward_metadata_ready = False

    # idiom: eager_runner.EagerRunner._execute_decode, twist: pre-plan for overlap, then pad and plan again on the padded batch before the eager launch
    # expect: clean
    def execute_eager_replanned(self, forward_batch: ForwardBatch):
        backend = self.model_runner.attn_backend
        idle = forward_batch.forward_mode.is_idle()
        if not idle:
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        self.model_runner._prepare_eager_forward_batch(forward_batch)
        if not idle:
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self._eager_tail(forward_batch)
