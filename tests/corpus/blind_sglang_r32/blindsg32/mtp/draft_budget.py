"""Per-request draft budgets.

Every request carries a draft budget (0..num_steps). The draft batch keeps
its full width; rows past their budget are masked out of the tree build.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Dict, List, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils.common import require_mlp_sync

from blindsg32.common.settings import MTPDraftSettings
from blindsg32.common.shapes import DraftBudget, StepRecord
from blindsg32.mtp.contexts import draft_backend_scope, step_timer
from blindsg32.mtp.plan_utils import logits_of, plan_and_mark, refresh_seq_lens_sum

logger = logging.getLogger(__name__)


class BudgetedMTPDrafter:
    def __init__(
        self,
        settings: MTPDraftSettings,
        draft_runner: Any,
        budget: Optional[DraftBudget] = None,
    ):
        self.settings = settings
        self.topk = settings.topk
        self.num_steps = settings.num_steps
        self.draft_runner = draft_runner
        self.backend = draft_runner.attn_backend
        self.budget = budget or DraftBudget(default=settings.default_draft_budget)
        self._replan_after_pad = settings.replan_after_pad
        self._pending: Optional[ForwardBatch] = None
        self.records: List[StepRecord] = []
        self.stats: Dict[str, float] = {}

    @classmethod
    def from_settings(cls, settings: MTPDraftSettings, draft_runner: Any) -> "BudgetedMTPDrafter":
        return cls(settings, draft_runner)

    @staticmethod
    def _budget_mask(budgets: torch.Tensor, step: int, topk: int) -> torch.Tensor:
        return (budgets > step).repeat_interleave(topk)

    def _apply_budget(self, forward_batch: ForwardBatch, rids: List[str], step: int) -> torch.Tensor:
        budgets = self.budget.as_tensor(rids, forward_batch.seq_lens.device)
        mask = self._budget_mask(budgets, step, self.topk)
        forward_batch.spec_info.budget_mask = mask
        return mask

    def _prepare(self, forward_batch: ForwardBatch) -> None:
        refresh_seq_lens_sum(forward_batch)
        self.backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        self._pending = forward_batch

    def _stage(self, forward_batch: ForwardBatch) -> None:
        refresh_seq_lens_sum(forward_batch)
        self.backend.init_forward_metadata(forward_batch)
        self._pending = forward_batch

    def _launch(self) -> Any:
        forward_batch, self._pending = self._pending, None
        assert forward_batch is not None, "nothing staged"
        with draft_backend_scope(self.backend, forward_batch):
            out = logits_of(self.draft_runner.forward(forward_batch))
        self.records.append(
            StepRecord(step=len(self.records), num_tokens=int(forward_batch.input_ids.shape[0]))
        )
        return out

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft_forward; budget-masked draft decode step planned on the draft backend, marked, run through draft_runner.forward
    # expect: SG106
    def run_budgeted_step(self, forward_batch: ForwardBatch, rids: List[str], step: int) -> Any:
        mask = self._apply_budget(forward_batch, rids, step)
        if not bool(mask.any()):
            return None
        refresh_seq_lens_sum(forward_batch)
        self.backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        with step_timer(self.stats, "budgeted_step"), draft_backend_scope(
            self.backend, forward_batch
        ):
            return logits_of(self.draft_runner.forward(forward_batch))

    # idiom: model_executor/forward_batch_info.py mark_forward_metadata_ready(replan_equivalent=True); budget-trimmed draft extend planned on the runner backend, forward re-plans after padding
    # expect: clean
    def run_budgeted_extend(self, forward_batch: ForwardBatch, rids: List[str]) -> Any:
        assert forward_batch.forward_mode.is_draft_extend_v2()
        self._apply_budget(forward_batch, rids, step=0)
        plan_and_mark(self.backend, forward_batch, replan_equivalent=True)
        return logits_of(self.draft_runner.forward(forward_batch))

    # idiom: model_runner.py ModelRunner.forward(skip_attn_backend_init=...) via a kwargs dict; probe step planned, then forwarded with {"skip_attn_backend_init": True} splatted
    # expect: SG106
    def run_budget_probe(self, forward_batch: ForwardBatch) -> Any:
        fwd_kwargs: Dict[str, Any] = {"skip_attn_backend_init": True}
        if forward_batch.forward_mode.is_idle():
            fwd_kwargs = {}
        else:
            refresh_seq_lens_sum(forward_batch)
            self.backend.init_forward_metadata(forward_batch)
        with draft_backend_scope(self.backend, forward_batch):
            return logits_of(self.draft_runner.forward(forward_batch, **fwd_kwargs))

    # idiom: model_executor/forward_batch_info.py needs_forward_metadata_init; replan flag is the env setting OR require_mlp_sync(), so DP batches are re-planned post-pad
    # expect: clean
    def run_zero_budget_rows(self, forward_batch: ForwardBatch) -> Any:
        replan = self._replan_after_pad or require_mlp_sync()
        refresh_seq_lens_sum(forward_batch)
        self.backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=replan)
        with draft_backend_scope(self.backend, forward_batch):
            return logits_of(self.draft_runner.forward(forward_batch))

    # idiom: speculative/eagle_worker_v2.py plan-stream prepare then main-stream forward; _prepare plans+marks and stashes the batch on self._pending, _launch forwards it
    # expect: SG106
    def step(self, forward_batch: ForwardBatch, rids: List[str], step: int) -> Any:
        self._apply_budget(forward_batch, rids, step)
        self._prepare(forward_batch)
        return self._launch()

    # idiom: speculative/eagle_worker_v2.py plan-stream prepare then main-stream forward; _stage only warms the plan (no mark) before _launch, the runner plans after padding
    # expect: clean
    def resume(self, forward_batch: ForwardBatch, rids: List[str], step: int) -> Any:
        self._apply_budget(forward_batch, rids, step)
        self._stage(forward_batch)
        return self._launch()

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; refuses DP attention only for tree drafts (topk > 1), the chain path plans+marks and forwards
    # expect: SG106
    def run_tree_budget_step(self, forward_batch: ForwardBatch, rids: List[str], step: int) -> Any:
        if self.topk > 1 and get_parallel().attn_dp_enabled:
            raise NotImplementedError(
                "budgeted tree drafts need equal widths on every DP rank"
            )
        self._apply_budget(forward_batch, rids, step)
        plan_and_mark(self.backend, forward_batch)
        with draft_backend_scope(self.backend, forward_batch):
            return logits_of(self.draft_runner.forward(forward_batch))

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft; refuses any DP-attention run before pre-planning (either tree or chain), then plans+marks and forwards
    # expect: clean
    def run_wide_budget_step(self, forward_batch: ForwardBatch, rids: List[str], step: int) -> Any:
        if self.topk > 1 or get_parallel().attn_dp_enabled:
            raise NotImplementedError(
                "wide budget steps are single-replica, chain-only"
            )
        self._apply_budget(forward_batch, rids, step)
        plan_and_mark(self.backend, forward_batch)
        with draft_backend_scope(self.backend, forward_batch):
            return logits_of(self.draft_runner.forward(forward_batch))
