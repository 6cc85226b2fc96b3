"""Draft-extend paths of the fork's pipelined EAGLE worker.

The worker overlaps the draft-extend plan with the target's sampling; the
code below is organised around small helpers (context managers, generators,
staged state on ``self``) so the overlap schedule can be changed per model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Iterator, Optional, Tuple

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

from blindsg13.runtime.planning import DraftExtendPlan, pad_for_dp, scoped_plan

logger = logging.getLogger(__name__)


class PipelinedEagleDraftWorker(EagleDraftWorker):
    """EAGLE v2 draft worker whose draft extend is split into stages."""

    # ------------------------------------------------------------------
    # helpers
    # ------------------------------------------------------------------
    @property
    def extend_backend(self):
        return self.draft_runner.attn_backend

    @contextlib.contextmanager
    def _preplanned(self, forward_batch: ForwardBatch):
        seq_lens_backup = forward_batch.seq_lens
        self.extend_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        try:
            yield forward_batch
        finally:
            forward_batch.seq_lens = seq_lens_backup

    def _iter_draft_extend_rounds(
        self, forward_batch: ForwardBatch, num_rounds: int
    ) -> Iterator[Tuple[int, ForwardBatch]]:
        """Plan once, then hand the same batch out for every round."""
        if not forward_batch.forward_mode.is_idle():
            self.extend_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        for r in range(num_rounds):
            yield r, forward_batch

    def _iter_padded_rounds(
        self, forward_batch: ForwardBatch, num_rounds: int
    ) -> Iterator[Tuple[int, ForwardBatch]]:
        """Pad for DP first, plan the padded batch, then hand it out."""
        pad_for_dp(self.draft_runner, forward_batch)
        if not forward_batch.forward_mode.is_idle():
            self.extend_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        for r in range(num_rounds):
            yield r, forward_batch

    def _build_draft_extend_batch(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ) -> ForwardBatch:
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        batch.input_ids = batch_result.next_token_ids.to(torch.int64)
        if not batch.forward_mode.is_idle():
            batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        return ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )

    # staged state on self --------------------------------------------
    def _stage(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        self._staged_fb: Optional[ForwardBatch] = self._build_draft_extend_batch(
            batch, batch_result
        )

    def _pad_staged(self):
        pad_for_dp(self.draft_runner, self._staged_fb)

    def _plan_staged(self):
        fb = self._staged_fb
        if fb is not None and not fb.forward_mode.is_idle():
            self.extend_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()

    def _run_staged(self):
        fb, self._staged_fb = self._staged_fb, None
        return self.draft_runner.forward(fb).logits_output

    # ------------------------------------------------------------------
    # labelled entry points
    # ------------------------------------------------------------------

    # expect: SG106
    def draft_extend_in_context(self, forward_batch: ForwardBatch):
        with self._preplanned(forward_batch) as fb:
            out = self.draft_runner.forward(fb)
        return out.logits_output

    # expect: clean
    def draft_extend_scoped_warmup(self, forward_batch: ForwardBatch):
        """The plan only lives inside the ``with``; forward runs after it."""
        with scoped_plan(self.extend_backend, forward_batch) as fb:
            num_tokens = fb.input_ids.shape[0]
            if self.seed_dsa_topk_from_draft_extend:
                fb.spec_info.dsa_seed_topk_capture = self._get_dsa_extend_topk_buf(
                    num_tokens
                )
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_rounds(self, forward_batch: ForwardBatch, num_rounds: int = 1):
        outputs = []
        for _, fb in self._iter_draft_extend_rounds(forward_batch, num_rounds):
            outputs.append(self.draft_runner.forward(fb).logits_output)
        return outputs

    # expect: clean
    def draft_extend_padded_rounds(
        self, forward_batch: ForwardBatch, num_rounds: int = 1
    ):
        outputs = []
        for _, fb in self._iter_padded_rounds(forward_batch, num_rounds):
            outputs.append(self.draft_runner.forward(fb).logits_output)
        return outputs

    # expect: SG106
    def draft_extend_closure(self, forward_batch: ForwardBatch):
        def _run():
            return self.draft_runner.forward(forward_batch).logits_output

        if forward_batch.forward_mode.is_idle():
            return _run()
        self.extend_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return _run()

    # expect: clean
    def draft_extend_closure_padded(self, forward_batch: ForwardBatch):
        def _plan():
            pad_for_dp(self.draft_runner, forward_batch)
            self.extend_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        if not forward_batch.forward_mode.is_idle():
            _plan()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_restoring(self, batch: ScheduleBatch, forward_batch: ForwardBatch):
        seq_lens_backup = batch.seq_lens
        forward_mode_backup = batch.forward_mode
        try:
            self.extend_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finally:
            batch.seq_lens = seq_lens_backup
            batch.forward_mode = forward_mode_backup
        return logits_output

    # expect: clean
    def draft_extend_restoring_unmarked(
        self, batch: ScheduleBatch, forward_batch: ForwardBatch
    ):
        """Pre-warm the backend's workspace only; no mark, so forward re-plans."""
        seq_lens_backup = batch.seq_lens
        try:
            self.extend_backend.init_forward_metadata(forward_batch)
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        finally:
            batch.seq_lens = seq_lens_backup
        return logits_output

    # expect: SG106
    def draft_extend_graph_or_eager(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ):
        runner = self.cuda_graph_runner_for_draft_extend
        if runner is not None and runner.can_run_graph(forward_batch):
            return runner.execute(forward_batch, select_index)
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        self.extend_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        return logits_output

    # expect: clean
    def draft_extend_graph_or_plain(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ):
        runner = self.cuda_graph_runner_for_draft_extend
        if runner is not None and runner.can_run_graph(forward_batch):
            return runner.execute(forward_batch, select_index)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        if not forward_batch.forward_mode.is_idle():
            logits_output.next_token_logits = logits_output.next_token_logits[
                select_index
            ]
        return logits_output

    # expect: SG106
    def draft_extend_from_plan(self, forward_batch: ForwardBatch):
        plan = DraftExtendPlan(forward_batch, self.extend_backend)
        fb = plan.prime()
        return self.draft_runner.forward(fb).logits_output

    # expect: clean
    def draft_extend_from_equivalent_plan(self, forward_batch: ForwardBatch):
        plan = DraftExtendPlan(
            forward_batch, self.extend_backend, replan_equivalent=True
        )
        fb = plan.prime()
        return self.draft_runner.forward(fb).logits_output

    # expect: SG106
    def draft_extend_via_tp_worker(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.extend_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        result = self.draft_worker.forward_batch_generation(
            None, forward_batch=forward_batch, is_verify=True
        )
        return result.logits_output

    # expect: clean
    def draft_extend_rebuilt(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        """An early plan on a scratch batch; the forward gets a fresh one."""
        scratch = self._build_draft_extend_batch(batch, batch_result)
        if not scratch.forward_mode.is_idle():
            self.extend_backend.init_forward_metadata(scratch)
            scratch.mark_forward_metadata_ready()
        fresh = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )
        return self.draft_runner.forward(fresh).logits_output

    # expect: SG106
    def draft_extend_staged(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        self._stage(batch, batch_result)
        self._plan_staged()
        return self._run_staged()

    # expect: clean
    def draft_extend_staged_padded(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        self._stage(batch, batch_result)
        self._pad_staged()
        self._plan_staged()
        return self._run_staged()

    # expect: SG106
    def draft_extend_on_copy(self, forward_batch: ForwardBatch):
        """Runs a shallow copy so the caller's batch keeps its seq_lens."""
        self.extend_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        run_fb = dataclasses.replace(forward_batch)
        return self.draft_runner.forward(run_fb).logits_output
