"""asyncio front-end for the rollout engine.

SGLang's forward is synchronous; the rollout service runs many episodes from
one event loop and pushes each forward onto a dedicated executor thread (the
CUDA context is bound to that thread).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import TYPE_CHECKING, Optional

from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
)
from sglang.srt.runtime_context import get_parallel

from blindsg31.rollout.batch_ops import runner_can_replay

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker

    from blindsg31.rollout.draft_workers import RolloutDraftWorker


class AsyncRolloutEngine:
    def __init__(
        self,
        worker: "RolloutDraftWorker",
        frozen_worker: Optional["FrozenKVMTPDraftWorker"] = None,
        executor: Optional[concurrent.futures.Executor] = None,
    ):
        self._worker = worker
        self._frozen = frozen_worker
        self._runner = worker.draft_runner
        self._target_runner = worker.target_runner
        self._draft_backend = worker.draft_attn_backend
        self._executor = executor or concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="sglang-fwd"
        )

    def _new_draft_batch(self, batch: "ScheduleBatch") -> ForwardBatch:
        return ForwardBatch.init_new(
            batch,
            self._runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
        )

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; plans + marks the draft batch, then awaits draft_runner.forward on the executor thread
    # expect: SG106
    async def draft_step(self, batch: "ScheduleBatch"):
        forward_batch = self._new_draft_batch(batch)
        if not forward_batch.forward_mode.is_idle():
            self._draft_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        loop = asyncio.get_running_loop()
        output = await loop.run_in_executor(
            self._executor, self._runner.forward, forward_batch
        )
        return output.logits_output

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; same async step, mark opts into the post-pad re-plan
    # expect: clean
    async def draft_step_replannable(self, batch: "ScheduleBatch"):
        forward_batch = self._new_draft_batch(batch)
        if not forward_batch.forward_mode.is_idle():
            self._runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        output = await asyncio.to_thread(self._runner.forward, forward_batch)
        return output.logits_output

    # idiom: speculative/eagle_worker_common.py run_eagle_verify; async eager TARGET_VERIFY planned + marked, target forward re-plans verify
    # expect: clean
    async def verify_step(self, verify_forward_batch: ForwardBatch):
        assert verify_forward_batch.forward_mode.is_target_verify()
        if not runner_can_replay(self._target_runner, verify_forward_batch):
            self._target_runner.attn_backend.init_forward_metadata(
                verify_forward_batch
            )
            verify_forward_batch.mark_forward_metadata_ready()
        output = await asyncio.to_thread(
            self._target_runner.forward, verify_forward_batch
        )
        return output.logits_output

    # idiom: speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker._init_frozen_kv_metadata + draft_forward; plans in the frozen target view, marks, runs the seed forward
    # expect: SG106
    def _sync_frozen_seed(self, forward_batch: ForwardBatch):
        worker = self._frozen
        if not forward_batch.forward_mode.is_idle():
            with worker._frozen_kv_target_view(forward_batch):
                worker.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        with worker._target_kv_pool_view(forward_batch):
            return worker.draft_model_runner.forward(forward_batch).logits_output

    async def frozen_seed(self, forward_batch: ForwardBatch):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, self._sync_frozen_seed, forward_batch
        )

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; early-returns to the replannable step when attention DP is on, pre-plans only single-DP
    # expect: clean
    async def draft_step_single_dp(self, batch: "ScheduleBatch"):
        if get_parallel().attn_dp_size > 1:
            return await self.draft_step_replannable(batch)
        forward_batch = self._new_draft_batch(batch)
        if not forward_batch.forward_mode.is_idle():
            self._draft_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        output = await asyncio.to_thread(self._runner.forward, forward_batch)
        return output.logits_output
