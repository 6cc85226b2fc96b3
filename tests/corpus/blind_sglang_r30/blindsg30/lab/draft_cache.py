"""A draft cache that keeps planned draft batches between scheduler steps."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Dict, Hashable, Optional, Tuple

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg30.utils import plan_helpers as ph

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend


class DraftCache:
    def __init__(self, runner: ModelRunner, backend: "AttentionBackend"):
        self.runner = runner
        self.backend = backend
        self._planned: Dict[Hashable, Tuple[float, ForwardBatch]] = {}

    # idiom: speculative/frozen_kv_mtp_worker_v2.py _init_frozen_kv_metadata; plans and marks into the cache dict, never runs a forward
    # expect: clean
    def put(self, key: Hashable, forward_batch: ForwardBatch) -> None:
        if not forward_batch.forward_mode.is_idle():
            self.backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        self._planned[key] = (time.monotonic(), forward_batch)

    def put_replannable(self, key: Hashable, forward_batch: ForwardBatch) -> None:
        if not forward_batch.forward_mode.is_idle():
            self.runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        self._planned[key] = (time.monotonic(), forward_batch)

    def take(self, key: Hashable) -> Optional[ForwardBatch]:
        entry = self._planned.pop(key, None)
        return None if entry is None else entry[1]

    # idiom: speculative/eagle_worker_v2.py EAGLEWorkerV2.draft; plan+mark via self.put into a dict, batch read back from the dict and forwarded
    # expect: SG106
    def prefetch_and_run(self, key: Hashable, forward_batch: ForwardBatch):
        self.put(key, forward_batch)
        cached = self.take(key)
        if cached is None:
            return None
        return self.runner.forward(cached).logits_output

    # idiom: speculative/eagle_worker_v2.py EAGLEWorkerV2.draft; cache stores replan_equivalent=True marks, same dict round-trip
    # expect: clean
    def prefetch_and_run_replannable(self, key: Hashable, forward_batch: ForwardBatch):
        if ph.runner_replays(self.runner, forward_batch):
            return self.runner.forward(forward_batch).logits_output
        self.put_replannable(key, forward_batch)
        cached = self.take(key)
        if cached is None:
            return None
        return self.runner.forward(cached).logits_output

    # idiom: speculative/adaptive_spec_params.py AdaptiveSpeculativeParams._route bookkeeping; age-based eviction of cached batches, only drops dict entries
    # expect: clean
    def evict_stale(self, max_age_s: float) -> int:
        now = time.monotonic()
        stale = [k for k, (ts, _) in self._planned.items() if now - ts > max_age_s]
        for k in stale:
            del self._planned[k]
        return len(stale)
