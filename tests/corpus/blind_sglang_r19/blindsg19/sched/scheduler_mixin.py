"""Scheduler mixin: build the ForwardBatch in the scheduler and pre-plan its
attention metadata there, so the planning overlaps the result processing of
the previous batch (non-overlap scheduler only)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.utils.common import require_mlp_sync

if TYPE_CHECKING:
    from sglang.srt.managers.scheduler import Scheduler

logger = logging.getLogger(__name__)


class SchedulerPreplanMixin:
    def _new_forward_batch(self: "Scheduler", batch: ScheduleBatch) -> ForwardBatch:
        return ForwardBatch.init_new(
            batch,
            self.tp_worker.model_runner,
            return_hidden_states_before_norm=False,
        )

    # expect: SG106
    def run_batch_preplanned(
        self: "Scheduler", batch: ScheduleBatch
    ) -> GenerationBatchResult:
        forward_batch = self._new_forward_batch(batch)
        model_runner = self.tp_worker.model_runner
        if forward_batch.forward_mode.is_decode():
            model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.tp_worker.forward_batch_generation(
            batch=None, forward_batch=forward_batch
        )

    # expect: SG106
    def run_batch_legacy_kwargs(
        self: "Scheduler", batch: ScheduleBatch
    ) -> GenerationBatchResult:
        forward_batch = self._new_forward_batch(batch)
        fwd_kwargs = {}
        if forward_batch.forward_mode.is_decode():
            self.tp_worker.model_runner.attn_backend.init_forward_metadata(
                forward_batch
            )
            fwd_kwargs["skip_attn_backend_init"] = True
        return self.tp_worker.forward_batch_generation(
            None, forward_batch=forward_batch, **fwd_kwargs
        )

    # expect: clean
    def run_batch_sync_aware(
        self: "Scheduler", batch: ScheduleBatch
    ) -> GenerationBatchResult:
        forward_batch = self._new_forward_batch(batch)
        graph_runner = self.tp_worker.model_runner.decode_cuda_graph_runner
        replays = graph_runner is not None and graph_runner.can_run_graph(
            forward_batch
        )
        if (
            forward_batch.forward_mode.is_decode()
            and not replays
            and not require_mlp_sync()
        ):
            # No MLP sync: the runner runs the batch as built, so the host
            # plan stays valid.
            self.tp_worker.model_runner.attn_backend.init_forward_metadata(
                forward_batch
            )
            forward_batch.mark_forward_metadata_ready()
        return self.tp_worker.forward_batch_generation(
            batch=None, forward_batch=forward_batch
        )

    # expect: clean
    def run_batch_explicit_replan(
        self: "Scheduler", batch: ScheduleBatch
    ) -> GenerationBatchResult:
        forward_batch = self._new_forward_batch(batch)
        if forward_batch.forward_mode.is_decode():
            # Warm the decode wrapper's plan cache on the scheduler thread;
            # the runner still plans the batch it runs.
            self.tp_worker.model_runner.attn_backend.init_forward_metadata(
                forward_batch
            )
        return self.tp_worker.forward_batch_generation(
            batch=None,
            forward_batch=forward_batch,
            skip_attn_backend_init=False,
        )
