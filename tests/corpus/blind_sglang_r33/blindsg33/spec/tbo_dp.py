"""Draft paths for deployments with DP attention and two-batch overlap."""

from __future__ import annotations

import logging
from typing import Callable, Dict, List, Tuple

import torch

from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.utils.common import require_mlp_sync

from blindsg33.spec.steps import run_tree_steps

logger = logging.getLogger(__name__)


class TboSplitDrafter:
    """Splits a draft-extend batch in two request halves so the two halves'
    draft forwards overlap with the target's two-batch-overlap stages."""

    def __init__(self, draft_runner: ModelRunner, num_draft_tokens: int):
        self.draft_runner = draft_runner
        self.num_draft_tokens = num_draft_tokens

    def _half(self, fb: ForwardBatch, start: int, end: int) -> ForwardBatch:
        n = self.num_draft_tokens
        seq_lens = fb.seq_lens[start:end]
        return ForwardBatch(
            forward_mode=ForwardMode.DRAFT_EXTEND_V2,
            batch_size=end - start,
            input_ids=fb.input_ids[start * n : end * n],
            req_pool_indices=fb.req_pool_indices[start:end],
            seq_lens=seq_lens,
            out_cache_loc=fb.out_cache_loc[start * n : end * n],
            seq_lens_sum=int(seq_lens.sum().item()),
            positions=fb.positions[start * n : end * n],
            extend_seq_lens=fb.extend_seq_lens[start:end],
            extend_prefix_lens=fb.extend_prefix_lens[start:end],
            extend_seq_lens_cpu=[n] * (end - start),
            extend_num_tokens=(end - start) * n,
            spec_algorithm=fb.spec_algorithm,
            spec_info=fb.spec_info,
            capture_hidden_mode=CaptureHiddenMode.FULL,
        )

    # idiom: batch_overlap/two_batch_overlap.py TboForwardBatchPreparer (child batches) — two request halves built with ForwardBatch(...) field by field (no DP token counts), each planned, marked and run
    # expect: clean
    def draft_halves(self, forward_batch: ForwardBatch) -> List[torch.Tensor]:
        bs = forward_batch.batch_size
        mid = bs // 2
        outs = []
        for start, end in ((0, mid), (mid, bs)):
            if end == start:
                continue
            half = self._half(forward_batch, start, end)
            self.draft_runner.attn_backend.init_forward_metadata(half)
            half.mark_forward_metadata_ready()
            outs.append(self.draft_runner.forward(half).logits_output.next_token_logits)
        return outs


class DpIdleAwareDrafter:
    def __init__(self, draft_worker):
        self.draft_worker = draft_worker

    def _run_idle(self, forward_batch: ForwardBatch):
        for _ in range(self.draft_worker.speculative_num_steps - 1):
            self.draft_worker.draft_runner.forward(forward_batch)
        return None, None, None

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft + _draft_forward_idle — IDLE ranks return early into the idle loop; other batches are planned on draft_attn_backend and marked before the step loop
    # expect: SG106
    def draft(self, forward_batch: ForwardBatch) -> Tuple:
        if forward_batch.forward_mode.is_idle():
            return self._run_idle(forward_batch)
        worker = self.draft_worker
        worker.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return run_tree_steps(worker, forward_batch)


class CanaryMarkedDrafter:
    """Draft extend with the lab's kv-canary bookkeeping."""

    def __init__(self, draft_runner: ModelRunner, canary=None):
        self.draft_runner = draft_runner
        self.canary = canary

    def _record(self, forward_batch: ForwardBatch) -> None:
        if self.canary is not None:
            self.canary.record_plan(forward_batch.batch_size, forward_batch.input_ids.shape[0])

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend — plans, marks with replan_equivalent=True, then marks again with mark_forward_metadata_ready() after the canary records the plan shape
    # expect: SG106
    def draft_extend(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            self._record(forward_batch)
            # Re-stamp the plan record after the canary touched input_ids.
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output


class ModeOptionsDrafter:
    def __init__(self, draft_runner: ModelRunner, overrides: Dict[str, dict] = None):
        self.draft_runner = draft_runner
        self.overrides = overrides or {"DECODE": {"replan_equivalent": True}}

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend — mark kwargs built from a dict: default {"replan_equivalent": False} merged with per-mode overrides keyed by forward_mode.name
    # expect: SG106
    def draft_extend(self, forward_batch: ForwardBatch):
        mode = forward_batch.forward_mode
        if mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        opts = {"replan_equivalent": False, **self.overrides.get(mode.name, {})}
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(**opts)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend — mark kwargs built from a dict whose replan_equivalent is require_mlp_sync()
    # expect: clean
    def draft_extend_synced(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        opts = {"replan_equivalent": require_mlp_sync()}
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(**opts)
        return self.draft_runner.forward(forward_batch).logits_output


class ClosureDrafter:
    def __init__(self, draft_worker):
        self.draft_worker = draft_worker

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft_forward — plans draft_attn_backend and marks once, then returns a per-step closure that sets inputs and calls draft_runner.forward under the step's ForwardContext
    # expect: SG106
    def _make_step_runner(self, forward_batch: ForwardBatch) -> Callable:
        worker = self.draft_worker
        worker.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

        def run_step(i: int, input_ids: torch.Tensor, out_cache_loc: torch.Tensor):
            forward_batch.input_ids = input_ids
            forward_batch.out_cache_loc = out_cache_loc
            with forward_context(
                ForwardContext(attn_backend=worker.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                return worker.draft_runner.forward(forward_batch).logits_output

        return run_step

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft_forward — per-step closure that plans on draft_runner.attn_backend and marks with replan_equivalent=True before each draft_runner.forward
    # expect: clean
    def _make_step_runner_v2(self, forward_batch: ForwardBatch) -> Callable:
        worker = self.draft_worker
        backend = worker.draft_runner.attn_backend

        def run_step(i: int, input_ids: torch.Tensor, out_cache_loc: torch.Tensor):
            forward_batch.input_ids = input_ids
            forward_batch.out_cache_loc = out_cache_loc
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            return worker.draft_runner.forward(forward_batch).logits_output

        return run_step

    def draft_steps(self, forward_batch: ForwardBatch, step_inputs, inline_plan: bool = False):
        make = (
            self._make_step_runner_v2
            if inline_plan
            else self._make_step_runner
        )
        run_step = make(forward_batch)
        return [run_step(i, ids, loc) for i, (ids, loc) in enumerate(step_inputs)]
