"""Draft-extend execution strategies selectable by --speculative-draft-extend-mode
in the fork. All of them take an already-built DRAFT_EXTEND_V2 ForwardBatch."""

from __future__ import annotations

import contextlib
import functools

import torch

from blindsg19.common.planning import (
    DraftBatchPlanner,
    DraftStepPlan,
    plan_and_mark,
    preplanned,
)
from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class DraftExtendRunner:
    def __init__(self, worker):
        # ``worker`` is an EagleDraftWorker (or subclass).
        self.worker = worker
        self.planner = DraftBatchPlanner(worker.draft_runner.attn_backend)

    @property
    def runner(self):
        return self.worker.draft_runner

    # expect: SG106
    def run_partial(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        prepare = functools.partial(
            plan_and_mark, backend=self.worker.draft_runner.attn_backend
        )
        prepare(forward_batch)
        out = self.worker.draft_runner.forward(forward_batch).logits_output
        return out.next_token_logits[select_index]

    # expect: clean
    def run_partial_replan(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ):
        prepare = functools.partial(
            plan_and_mark,
            backend=self.worker.draft_runner.attn_backend,
            replan_equivalent=True,
        )
        prepare(forward_batch)
        out = self.worker.draft_runner.forward(forward_batch).logits_output
        return out.next_token_logits[select_index]

    # expect: SG106
    def run_in_context(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        with preplanned(forward_batch, self.runner.attn_backend) as fb:
            out = self.runner.forward(fb).logits_output
        return out.next_token_logits[select_index]

    # expect: clean
    def run_in_context_dp_aware(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ):
        # A batch that the runner will pad for the MLP sync is left to the
        # runner's own (post-pad) planning.
        if forward_batch.global_num_tokens_cpu is None:
            ctx = preplanned(forward_batch, self.runner.attn_backend)
        else:
            ctx = contextlib.nullcontext(forward_batch)
        with ctx as fb:
            out = self.runner.forward(fb).logits_output
        return out.next_token_logits[select_index]

    # expect: SG106
    def run_closure(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        backend = self.runner.attn_backend

        def _host_prepare():
            if forward_batch.forward_mode.is_idle():
                return
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        _host_prepare()
        logits = self.runner.forward(forward_batch).logits_output.next_token_logits
        return logits[select_index]

    # expect: SG106
    def run_dataclass_plan(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ):
        step = DraftStepPlan(forward_batch, self.runner.attn_backend)
        fb = step.apply()
        return self.runner.forward(fb).logits_output.next_token_logits[select_index]

    # expect: clean
    def run_dataclass_plan_post_pad(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ):
        step = DraftStepPlan(
            forward_batch, self.runner.attn_backend, replan_equivalent=True
        )
        fb = step.apply()
        return self.runner.forward(fb).logits_output.next_token_logits[select_index]

    # expect: SG106
    def run_with_planner(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        if not forward_batch.forward_mode.is_idle():
            self.planner.plan(forward_batch)
        out = self.runner.forward(forward_batch).logits_output
        return out.next_token_logits[select_index]
