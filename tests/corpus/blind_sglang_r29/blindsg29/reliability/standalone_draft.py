"""Standalone small-draft-model worker with pre-planned draft forwards.

The standalone draft model is a real (small) model; its draft-extend and
draft-decode forwards are cheap enough that attention planning shows up in
profiles, so this worker plans ahead on the plan stream where it can.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft_extend
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker

from blindsg29.reliability import plan_utils
from blindsg29.reliability.planning_mixin import PrePlanMixin

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.utils import GenerationBatchResult

logger = logging.getLogger(__name__)


class HardenedStandaloneDraftWorker(PrePlanMixin, StandaloneDraftWorker):
    @property
    def model_runner(self):
        return self.draft_runner

    def _extend_input_from(self, batch_result: "GenerationBatchResult"):
        accept_lens = batch_result.accept_lens
        return EagleDraftExtendInput(
            hidden_states=None,
            num_correct_drafts=accept_lens - 1,
            num_accept_tokens=accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )

    def _select_rows(self, batch, batch_result):
        n = self.speculative_num_draft_tokens
        return (
            torch.arange(0, len(batch.seq_lens) * n, n, device=self.device)
            + batch_result.accept_lens
            - 1
        )

    # idiom: eagle_worker_v2.EAGLEWorkerV2._draft_extend_for_decode, overridden for the standalone draft: SGLang's prepare_for_draft_extend plans and marks, then draft_runner.forward
    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: "ScheduleBatch",
        batch_result: "GenerationBatchResult",
        *,
        kv_loc_plan=None,
    ):
        next_token_ids = batch_result.next_token_ids.to(torch.int64)
        select_index = self._select_rows(batch, batch_result)
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                self._extend_input_from(batch_result),
                batch,
                next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner,
                self.cuda_graph_runner_for_draft_extend,
                return_hidden_states_before_norm=False,
                kv_loc_plan=kv_loc_plan,
            )
        graph = self.cuda_graph_runner_for_draft_extend
        if graph is not None and graph.can_run_graph(forward_batch):
            logits_output = graph.execute(forward_batch, select_index)
        else:
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            logits_output.next_token_logits = logits_output.next_token_logits[
                select_index
            ]
        self._publish_draft_logits(batch_result, logits_output)

    # idiom: eagle_worker_v2.EAGLEWorkerV2._draft_extend_for_decode via prepare_for_draft_extend, dropping the mark when DP padding is expected so ModelRunner.forward re-plans
    # expect: clean
    def _draft_extend_for_decode_dp_safe(
        self,
        batch: "ScheduleBatch",
        batch_result: "GenerationBatchResult",
        *,
        kv_loc_plan=None,
    ):
        next_token_ids = batch_result.next_token_ids.to(torch.int64)
        select_index = self._select_rows(batch, batch_result)
        forward_batch = prepare_for_draft_extend(
            self._extend_input_from(batch_result),
            batch,
            next_token_ids,
            self.speculative_num_draft_tokens,
            self.draft_runner,
            self.cuda_graph_runner_for_draft_extend,
            return_hidden_states_before_norm=False,
            kv_loc_plan=kv_loc_plan,
        )
        graph = self.cuda_graph_runner_for_draft_extend
        if graph is not None and graph.can_run_graph(forward_batch):
            logits_output = graph.execute(forward_batch, select_index)
        else:
            if plan_utils.dp_padding_expected(forward_batch):
                # The runner pads for MLP sync; let it plan the padded batch.
                forward_batch.forward_metadata_ready = False
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            logits_output.next_token_logits = logits_output.next_token_logits[
                select_index
            ]
        self._publish_draft_logits(batch_result, logits_output)

    def _publish_draft_logits(self, batch_result, logits_output) -> None:
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = torch.topk(probs, self.topk, dim=-1)
        nxt = batch_result.next_draft_input
        nxt.topk_p, nxt.topk_index = topk_p, topk_index
        nxt.hidden_states = logits_output.hidden_states

    def _prefill_forward_batch(self, batch: "ScheduleBatch", target_hidden_states):
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=target_hidden_states,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            return_hidden_states_before_norm=False,
        )
        forward_batch.return_logprob = False
        return forward_batch

    # idiom: eagle_worker.EAGLEWorker.forward_draft_extend_after_decode (0.5.6) ported to the v2 prefill draft extend: init_forward_metadata then forward(skip_attn_backend_init=True)
    # expect: SG106
    def _draft_extend_for_prefill_eager(self, batch: "ScheduleBatch", target_hidden_states):
        forward_batch = self._prefill_forward_batch(batch, target_hidden_states)
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        if self.flags.standalone_preplan_extend:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        logits_output = self.draft_runner.forward(
            forward_batch, skip_attn_backend_init=self.flags.standalone_preplan_extend
        ).logits_output
        return logits_output

    # idiom: eagle_worker.EAGLEWorker.forward_draft_extend_after_decode with the legacy skip kwarg bound through functools.partial
    # expect: SG106
    def _draft_extend_partial(self, batch: "ScheduleBatch", target_hidden_states):
        forward_batch = self._prefill_forward_batch(batch, target_hidden_states)
        run = functools.partial(self.draft_runner.forward, skip_attn_backend_init=True)
        if forward_batch.forward_mode.is_idle():
            run = self.draft_runner.forward
        else:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        return run(forward_batch).logits_output

    # idiom: eagle_worker_v2.EagleDraftWorker.draft + draft_forward: multi-step draft backend planned and marked once, then one ModelRunner.forward per step
    # expect: SG106
    def _draft_decode_steps(self, forward_batch: ForwardBatch, input_ids_per_step):
        if forward_batch.forward_mode.is_idle() or self.speculative_num_steps <= 1:
            return []
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        outputs = []
        for i in range(self.speculative_num_steps - 1):
            forward_batch.input_ids = input_ids_per_step[i]
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                outputs.append(self.draft_runner.forward(forward_batch).logits_output)
        return outputs

    # idiom: eagle_worker_v2.EagleDraftWorker.draft with the decode graph replay branch and an unplanned one-step eager fallback
    # expect: clean
    def _draft_decode_single_step(self, forward_batch: ForwardBatch):
        if self.cuda_graph_runner is not None and self.cuda_graph_runner.can_run_graph(
            forward_batch
        ):
            return self.cuda_graph_runner.execute(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: eagle_worker_v2.EAGLEWorkerV2._draft_extend_for_decode plan-stream overlap: plan + mark on the plan stream, join, then draft_runner.forward
    # expect: SG106
    def _draft_extend_plan_stream(self, forward_batch: ForwardBatch):
        device_mod = torch.get_device_module(self.device)
        if self.plan_stream is not None:
            self.plan_stream.wait_stream(device_mod.current_stream())
        with self.plan_stream_ctx:
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        if self.plan_stream is not None:
            device_mod.current_stream().wait_stream(self.plan_stream)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: eagle_worker_v2.EAGLEWorkerV2._draft_extend_for_decode plan-stream overlap used only to warm the backend (no mark), runner plans the padded batch
    # expect: clean
    def _draft_extend_plan_stream_warm(self, forward_batch: ForwardBatch):
        device_mod = torch.get_device_module(self.device)
        if self.plan_stream is not None:
            self.plan_stream.wait_stream(device_mod.current_stream())
        with self.plan_stream_ctx:
            plan_utils.plan_only(self.draft_runner.attn_backend, forward_batch)
        if self.plan_stream is not None:
            device_mod.current_stream().wait_stream(self.plan_stream)
        return self.draft_runner.forward(forward_batch).logits_output


def run_standalone_prefill_extend(
    worker: HardenedStandaloneDraftWorker, batch, target_hidden_states, use_partial: bool = False
):
    if use_partial:
        return worker._draft_extend_partial(batch, target_hidden_states)
    return worker._draft_extend_for_prefill_eager(batch, target_hidden_states)
