"""Spec-v2 overlap worker variants: draft planning moved onto the plan stream.

These mirror ``EagleDraftWorker`` / ``EAGLEWorkerV2`` but move more of the
CPU-side planning onto ``plan_stream`` so it overlaps the previous verify.
"""

from __future__ import annotations

import logging
from typing import Optional, Tuple

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import (
    prepare_for_draft,
    prepare_for_draft_extend,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import fast_topk, require_mlp_sync

from blindsg33.spec.steps import run_tree_steps

logger = logging.getLogger(__name__)


def _select_index(batch: ScheduleBatch, accept_lens: torch.Tensor, width: int):
    return (
        torch.arange(
            0, len(batch.seq_lens) * width, width, device=accept_lens.device
        )
        + accept_lens
        - 1
    )


class OverlapTreeWorker(EagleDraftWorker):
    def _current_stream(self):
        return torch.get_device_module(self.device).current_stream()

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft — prepare_for_draft, the multi-step plan and the mark all run under plan_stream_ctx; the eager step loop runs on the compute stream after the join
    # expect: SG106
    def _draft_on_plan_stream(self, batch: ScheduleBatch) -> Tuple[torch.Tensor, ...]:
        if self.plan_stream:
            self.plan_stream.wait_stream(self._current_stream())
        with self.plan_stream_ctx:
            forward_batch, can_run_graph, _ = prepare_for_draft(
                batch.spec_info,
                self.req_to_token_pool,
                batch,
                self.cuda_graph_runner,
                self.draft_runner,
                self.topk,
                self.speculative_num_steps,
            )
            if not can_run_graph and not forward_batch.forward_mode.is_idle():
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            self._current_stream().wait_stream(self.plan_stream)

        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)[:3]
        return run_tree_steps(self, forward_batch)

    def _draft_extend_input(self, batch_result: GenerationBatchResult):
        return EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )

    def _publish(self, batch_result: GenerationBatchResult, logits_output, select_index):
        logits = logits_output.next_token_logits[select_index]
        probs = torch.softmax(logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        nxt = batch_result.next_draft_input
        nxt.topk_p, nxt.topk_index = topk_p, topk_index
        nxt.hidden_states = logits_output.hidden_states[select_index]

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode — override that builds the batch with eagle_worker_common.prepare_for_draft_extend on the plan stream and runs draft_runner.forward when the draft-extend graph cannot run
    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        next_token_ids = batch_result.next_token_ids.to(torch.int64)
        select_index = _select_index(
            batch, batch_result.accept_lens, self.speculative_num_draft_tokens
        )
        if self.plan_stream:
            self.plan_stream.wait_stream(self._current_stream())
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                self._draft_extend_input(batch_result),
                batch,
                next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner,
                self.cuda_graph_runner_for_draft_extend,
                return_hidden_states_before_norm=False,
                kv_loc_plan=kv_loc_plan,
            )
        if self.plan_stream:
            self._current_stream().wait_stream(self.plan_stream)

        runner = self.cuda_graph_runner_for_draft_extend
        if runner and runner.can_run_graph(forward_batch):
            logits_output = runner.execute(forward_batch, select_index)
            select_index = slice(None)
        else:
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._publish(batch_result, logits_output, select_index)

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode — prepare_for_draft_extend, then graph replay; the eager fallback raises when require_mlp_sync() and otherwise runs draft_runner.forward
    # expect: clean
    def _draft_extend_graph_first(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
    ):
        next_token_ids = batch_result.next_token_ids.to(torch.int64)
        select_index = _select_index(
            batch, batch_result.accept_lens, self.speculative_num_draft_tokens
        )
        forward_batch = prepare_for_draft_extend(
            self._draft_extend_input(batch_result),
            batch,
            next_token_ids,
            self.speculative_num_draft_tokens,
            self.draft_runner,
            self.cuda_graph_runner_for_draft_extend,
            return_hidden_states_before_norm=False,
        )
        runner = self.cuda_graph_runner_for_draft_extend
        if runner and runner.can_run_graph(forward_batch):
            logits_output = runner.execute(forward_batch, select_index)
            select_index = slice(None)
        elif require_mlp_sync():
            raise RuntimeError(
                "eager draft extend is not supported for this deployment; "
                "raise --cuda-graph-max-bs so every draft-extend batch replays"
            )
        else:
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._publish(batch_result, logits_output, select_index)

    # idiom: speculative/eagle_utils.py eagle_prepare_for_verify + eagle_worker_common.run_eagle_verify — TARGET_VERIFY batch: load_batch for graphs, else target attn_backend.init_forward_metadata; marked either way before forward_batch_generation
    # expect: clean
    def _verify_staged(self, batch: ScheduleBatch):
        verify_input = batch.spec_info
        batch.input_ids = verify_input.draft_token
        batch.forward_mode = (
            ForwardMode.IDLE
            if batch.forward_mode.is_idle()
            else ForwardMode.TARGET_VERIFY
        )
        target_runner = self.target_worker.model_runner
        forward_batch = ForwardBatch.init_new(
            batch,
            target_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )
        graph_runner = target_runner.decode_cuda_graph_runner
        if graph_runner and graph_runner.can_run_graph(forward_batch):
            graph_runner.load_batch(forward_batch)
        elif not forward_batch.forward_mode.is_idle():
            target_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.target_worker.forward_batch_generation(
            batch=None, forward_batch=forward_batch, is_verify=True
        )

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend — draft-extend batch planned on draft_runner.attn_backend and marked with replan_equivalent=True, eager forward
    # expect: clean
    def _draft_extend_inline(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
    ):
        select_index = _select_index(
            batch, batch_result.accept_lens, self.speculative_num_draft_tokens
        )
        bs = len(batch.seq_lens)
        batch.spec_info = self._draft_extend_input(batch_result)
        batch.input_ids = batch_result.next_token_ids.to(torch.int64)
        batch.prefix_lens = batch.seq_lens.to(torch.int32)
        batch.extend_lens = torch.full(
            (bs,),
            self.speculative_num_draft_tokens,
            dtype=torch.int32,
            device=self.device,
        )
        batch.extend_num_tokens = bs * self.speculative_num_draft_tokens
        batch.forward_mode = (
            ForwardMode.IDLE
            if batch.forward_mode.is_idle()
            else ForwardMode.DRAFT_EXTEND_V2
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )
        forward_batch.seq_lens = forward_batch.seq_lens + self.speculative_num_draft_tokens
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._publish(batch_result, logits_output, select_index)
