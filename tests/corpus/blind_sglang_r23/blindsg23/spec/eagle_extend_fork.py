"""Draft-extend (post-verify) variants of the fork's EAGLE v2 draft worker.

The draft-extend batch re-runs the draft over the accepted window
(``num_draft_tokens`` rows per request, DRAFT_EXTEND_V2) to refresh the draft
KV cache and seed the next draft step.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft_extend
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

from blindsg23.common.plan_helpers import maybe_log_shapes, plan_and_mark


class _ExtendBase(EagleDraftWorker):
    def _select_index(self, batch: ScheduleBatch, accept_lens: torch.Tensor) -> torch.Tensor:
        ndt = self.speculative_num_draft_tokens
        return (
            torch.arange(len(batch.seq_lens), device=self.device) * ndt
            + accept_lens
            - 1
        )

    def _build_extend_batch(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
    ) -> ForwardBatch:
        """DRAFT_EXTEND_V2 batch over the verify window; no planning here."""
        ndt = self.speculative_num_draft_tokens
        bs = len(batch.seq_lens)
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=ndt,
            num_tokens_for_logprob_per_req=ndt,
        )
        batch.input_ids = batch_result.next_token_ids.to(torch.int64)
        batch.prefix_lens = batch.seq_lens.to(torch.int32)
        batch.extend_lens = torch.full(
            (bs,), ndt, dtype=torch.int32, device=batch.seq_lens.device
        )
        batch.extend_num_tokens = bs * ndt
        if not batch.forward_mode.is_idle():
            batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )
        # The forward sees the post-write length; the schedule batch keeps its own.
        forward_batch.seq_lens = forward_batch.seq_lens + ndt
        forward_batch.extend_seq_lens_cpu = [ndt] * bs
        return forward_batch

    def _graph_runner_for(self, forward_batch: ForwardBatch):
        graph = self.cuda_graph_runner_for_draft_extend
        if graph is not None and graph.can_run_graph(forward_batch):
            return graph
        return None

    def _pick_rows(self, logits_output, select_index):
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        if logits_output.hidden_states is not None:
            logits_output.hidden_states = logits_output.hidden_states[select_index]
        return logits_output


class DraftExtendAfterVerify(_ExtendBase):
    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (plan stream + eager forward)
    # expect: SG106
    def run_draft_extend(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        select_index = self._select_index(batch, batch_result.accept_lens)
        if self.plan_stream:
            self.plan_stream.wait_stream(torch.cuda.current_stream())
        with self.plan_stream_ctx:
            forward_batch = self._build_extend_batch(batch, batch_result)
            graph = self._graph_runner_for(forward_batch)
            if graph is None and not forward_batch.forward_mode.is_idle():
                self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            torch.cuda.current_stream().wait_stream(self.plan_stream)
        if graph is not None:
            return graph.execute(forward_batch, select_index)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._pick_rows(logits_output, select_index)


class DraftExtendAfterVerifyLazy(_ExtendBase):
    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (pre-plan left unmarked)
    # expect: clean
    def run_draft_extend(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        select_index = self._select_index(batch, batch_result.accept_lens)
        if self.plan_stream:
            self.plan_stream.wait_stream(torch.cuda.current_stream())
        with self.plan_stream_ctx:
            forward_batch = self._build_extend_batch(batch, batch_result)
            graph = self._graph_runner_for(forward_batch)
            if graph is None and not forward_batch.forward_mode.is_idle():
                # Warm the index buffers on the plan stream. Deliberately not
                # marked: the forward pads for DP and plans again.
                self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
        if self.plan_stream:
            torch.cuda.current_stream().wait_stream(self.plan_stream)
        if graph is not None:
            return graph.execute(forward_batch, select_index)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._pick_rows(logits_output, select_index)


class UpstreamExtendWorker(_ExtendBase):
    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode -> eagle_worker_common.prepare_for_draft_extend
    # expect: SG106
    def draft_extend_for_decode(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        select_index = self._select_index(batch, batch_result.accept_lens)
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        forward_batch = prepare_for_draft_extend(
            draft_extend_input,
            batch,
            batch_result.next_token_ids.to(torch.int64),
            self.speculative_num_draft_tokens,
            self.draft_runner,
            self.cuda_graph_runner_for_draft_extend,
            return_hidden_states_before_norm=False,
        )
        graph = self._graph_runner_for(forward_batch)
        if graph is not None:
            return graph.execute(forward_batch, select_index)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._pick_rows(logits_output, select_index)


class UpstreamExtendWorkerFixed(_ExtendBase):
    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend + forward_batch_info.py needs_forward_metadata_init
    # expect: clean
    def draft_extend_for_decode(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        select_index = self._select_index(batch, batch_result.accept_lens)
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        forward_batch = prepare_for_draft_extend(
            draft_extend_input,
            batch,
            batch_result.next_token_ids.to(torch.int64),
            self.speculative_num_draft_tokens,
            self.draft_runner,
            self.cuda_graph_runner_for_draft_extend,
            return_hidden_states_before_norm=False,
        )
        graph = self._graph_runner_for(forward_batch)
        if graph is not None:
            return graph.execute(forward_batch, select_index)
        if forward_batch.global_num_tokens_cpu is not None:
            # prepare_for_draft_extend planned the pre-pad batch; under DP the
            # forward pads it, so drop the mark and let the forward plan.
            forward_batch.forward_metadata_ready = False
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._pick_rows(logits_output, select_index)


class _PrepChainExtendBase(_ExtendBase):
    """Draft extend whose batch preparation is split into stages (build,
    hidden-state hookup, plan) so the plan stage can run on the plan stream."""

    def _finalize_window_batch(
        self, forward_batch: ForwardBatch, replan_equivalent: bool
    ) -> ForwardBatch:
        plan_and_mark(
            self.draft_runner.attn_backend,
            forward_batch,
            replan_equivalent=replan_equivalent,
        )
        return forward_batch

    def _attach_hidden(
        self, forward_batch: ForwardBatch, batch_result: GenerationBatchResult
    ) -> ForwardBatch:
        hidden = batch_result.logits_output.hidden_states
        if hidden is not None and forward_batch.spec_info is not None:
            forward_batch.spec_info.hidden_states = hidden
        forward_batch.return_logprob = False
        return forward_batch

    def _prepare_window(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        replan_equivalent: bool = False,
    ) -> ForwardBatch:
        forward_batch = self._build_extend_batch(batch, batch_result)
        forward_batch = self._attach_hidden(forward_batch, batch_result)
        return self._finalize_window_batch(forward_batch, replan_equivalent)


class PrepChainExtendWorker(_PrepChainExtendBase):
    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (staged prep, plan + mark at the end) -> _draft_extend_for_decode
    # expect: SG106
    def extend_via_prep_chain(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        select_index = self._select_index(batch, batch_result.accept_lens)
        forward_batch = self._prepare_window(batch, batch_result)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._pick_rows(logits_output, select_index)


class PrepChainExtendWorkerSafe(_PrepChainExtendBase):
    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (staged prep) + mark_forward_metadata_ready(replan_equivalent=True)
    # expect: clean
    def extend_via_prep_chain(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        log_shapes: Optional[bool] = None,
    ):
        select_index = self._select_index(batch, batch_result.accept_lens)
        # Planned on the runner's own backend (no view context), so the
        # forward may re-plan once DP padding reshapes the batch.
        forward_batch = self._prepare_window(
            batch, batch_result, replan_equivalent=True
        )
        if log_shapes:
            maybe_log_shapes(True, "draft_extend", forward_batch)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._pick_rows(logits_output, select_index)
