"""Draft-model weight refresh from the online trainer, and OOM retries.

The trainer pushes fresh draft weights every N steps.  After a push the lab
re-runs the last draft batch so the cached draft hidden states match the new
weights before the next verify.
"""

from __future__ import annotations

import gc
import logging
from typing import Callable, Iterable, Optional, Tuple

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg33.spec.steps import run_tree_steps

logger = logging.getLogger(__name__)


class DraftWeightRefresher:
    def __init__(self, draft_worker):
        # ``draft_worker`` is an EagleDraftWorker (or subclass).
        self.draft_worker = draft_worker
        self.version = 0
        self._last_decode_batch: Optional[ForwardBatch] = None
        self._last_extend_batch: Optional[ForwardBatch] = None

    @property
    def draft_runner(self) -> ModelRunner:
        return self.draft_worker.draft_runner

    def remember(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_draft_extend_v2():
            self._last_extend_batch = forward_batch
        elif forward_batch.forward_mode.is_decode():
            self._last_decode_batch = forward_batch

    def _load(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        self.draft_runner.model.load_weights(named_tensors)
        self.version += 1

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft (eager branch) — after a trainer push, re-plans the remembered DECODE draft batch on draft_attn_backend, marks it and replays the step loop
    # expect: SG106
    def warm_after_refresh(self, named_tensors) -> Optional[Tuple[torch.Tensor, ...]]:
        self._load(named_tensors)
        forward_batch = self._last_decode_batch
        if forward_batch is None or forward_batch.forward_mode.is_idle():
            return None
        self.draft_worker.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return run_tree_steps(self.draft_worker, forward_batch)

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode — after a trainer push, re-plans the remembered DRAFT_EXTEND_V2 batch on the draft runner's backend, marks it and reruns draft_runner.forward
    # expect: SG106
    def replay_last_extend(self, named_tensors):
        self._load(named_tensors)
        forward_batch = self._last_extend_batch
        if forward_batch is None:
            return None
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode — after a trainer push, clears forward_metadata_ready on the remembered DRAFT_EXTEND_V2 batch and reruns draft_runner.forward
    # expect: clean
    def replay_last_extend_cold(self, named_tensors):
        self._load(named_tensors)
        forward_batch = self._last_extend_batch
        if forward_batch is None:
            return None
        forward_batch.forward_metadata_ready = False
        return self.draft_runner.forward(forward_batch).logits_output


class DraftRetryPolicy:
    """Retries a draft-extend forward after a CUDA OOM with a freed cache."""

    def __init__(self, draft_runner: ModelRunner, max_retries: int = 1):
        self.draft_runner = draft_runner
        self.max_retries = max_retries

    def _free(self) -> None:
        gc.collect()
        torch.cuda.empty_cache()

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend + draft_runner.forward — planning wrapped in try: the first plan marks with replan_equivalent=True, the OutOfMemoryError handler frees the cache, re-plans and marks with mark_forward_metadata_ready(); forward after the try
    # expect: SG106
    def run_with_retry(self, forward_batch: ForwardBatch):
        backend = self.draft_runner.attn_backend
        try:
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        except torch.cuda.OutOfMemoryError:
            logger.warning(
                "draft-extend planning OOM at bs=%d; retrying", forward_batch.batch_size
            )
            self._free()
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend + draft_runner.forward — planning retried in a loop after OutOfMemoryError; every successful plan marks with replan_equivalent=True; forward after the loop
    # expect: clean
    def run_with_retries(self, forward_batch: ForwardBatch):
        backend = self.draft_runner.attn_backend
        attempt = 0
        while True:
            try:
                backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
                break
            except torch.cuda.OutOfMemoryError:
                attempt += 1
                if attempt > self.max_retries:
                    raise
                self._free()
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend + draft_runner.forward — plan and mark inside try, forward, and clear forward_metadata_ready in finally
    # expect: SG106
    def run_and_reset(self, forward_batch: ForwardBatch):
        try:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            return self.draft_runner.forward(forward_batch).logits_output
        except torch.cuda.OutOfMemoryError:
            self._free()
            raise
        finally:
            forward_batch.forward_metadata_ready = False

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend + draft_runner.forward — plan and mark inside try, clear forward_metadata_ready in finally, forward after the try block
    # expect: clean
    def plan_then_release(self, forward_batch: ForwardBatch, on_planned: Optional[Callable] = None):
        try:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            if on_planned is not None:
                on_planned(forward_batch)
        except torch.cuda.OutOfMemoryError:
            self._free()
        finally:
            forward_batch.forward_metadata_ready = False
        return self.draft_runner.forward(forward_batch).logits_output
