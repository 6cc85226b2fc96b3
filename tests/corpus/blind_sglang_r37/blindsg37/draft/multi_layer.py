"""Multi-layer EAGLE draft-extend services.

One draft runner per MTP layer (``draft_runner_list``); each has its own
attention backend. The fork keeps the runner list, the per-layer backends and
the plan stream on a service object shared by the decode and prefill paths.
"""

from __future__ import annotations

import contextlib
from typing import List, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft_extend
from sglang.srt.utils.common import fast_topk, require_mlp_sync

from blindsg37.draft._plan_helpers import replan_kwargs_for


def _rotate(forward_batch: ForwardBatch, topk_index: torch.Tensor, select_index: torch.Tensor):
    if forward_batch.extend_seq_lens is None:
        return
    from sglang.kernels.ops.speculative.eagle import rotate_input_ids

    rotate_input_ids(
        forward_batch.input_ids,
        forward_batch.extend_start_loc,
        forward_batch.extend_seq_lens,
        topk_index,
        select_index,
    )


class MultiLayerDraftExtendService:
    def __init__(
        self,
        draft_runner_list,
        cuda_graph_runner_for_draft_extend,
        topk: int,
        num_steps: int,
        num_draft_tokens: int,
        plan_stream=None,
    ):
        self.draft_runner_list = draft_runner_list
        self.cuda_graph_runner_for_draft_extend = cuda_graph_runner_for_draft_extend
        self.topk = topk
        self.speculative_num_steps = num_steps
        self.speculative_num_draft_tokens = num_draft_tokens
        self.plan_stream = plan_stream
        self.plan_stream_ctx = (
            torch.cuda.stream(plan_stream) if plan_stream is not None else contextlib.nullcontext()
        )

    def _select_index(self, batch: ScheduleBatch, accept_lens: torch.Tensor):
        return (
            torch.arange(len(batch.seq_lens), device=accept_lens.device)
            * self.speculative_num_draft_tokens
            + accept_lens
            - 1
        )

    def _bind_step_pools(self, forward_batch: ForwardBatch, step: int) -> None:
        forward_batch.req_to_token_pool = self.draft_runner_list[step].req_to_token_pool
        forward_batch.token_to_kv_pool = self.draft_runner_list[step].token_to_kv_pool

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode
    # expect: SG106
    def run_eager_steps(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            runner = self.draft_runner_list[step]
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            out = runner.forward(forward_batch).logits_output
            logits = out.next_token_logits[select_index]
            topk_p, topk_index = fast_topk(torch.softmax(logits, dim=-1), self.topk, dim=-1)
            _rotate(forward_batch, topk_index, select_index)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return torch.cat(topk_p_list, dim=1), torch.cat(topk_index_list, dim=1)

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode
    # expect: clean
    def run_eager_steps_per_layer(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            runner = self.draft_runner_list[step]
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            out = runner.forward(forward_batch).logits_output
            logits = out.next_token_logits[select_index]
            topk_p, topk_index = fast_topk(torch.softmax(logits, dim=-1), self.topk, dim=-1)
            _rotate(forward_batch, topk_index, select_index)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return torch.cat(topk_p_list, dim=1), torch.cat(topk_index_list, dim=1)

    # idiom: sglang/srt/speculative/eagle_utils.py eagle_prepare_for_verify (load_batch + mark_forward_metadata_ready)
    # expect: clean
    def forward_first_layer(self, forward_batch: ForwardBatch):
        runner = self.draft_runner_list[0]
        graph_runner = runner.decode_cuda_graph_runner
        can_run_graph = bool(graph_runner and graph_runner.can_run_graph(forward_batch))
        if can_run_graph:
            graph_runner.load_batch(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_utils.py eagle_prepare_for_verify (load_batch + mark_forward_metadata_ready)
    # expect: SG106
    def forward_first_layer_preplanned(self, forward_batch: ForwardBatch):
        runner = self.draft_runner_list[0]
        graph_runner = runner.decode_cuda_graph_runner
        can_run_graph = bool(graph_runner and graph_runner.can_run_graph(forward_batch))
        if can_run_graph:
            graph_runner.load_batch(forward_batch)
        else:
            runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (plan_stream_ctx)
    # expect: SG106
    def draft_extend_on_plan_stream(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_tokens_per_req=self.speculative_num_steps + 1,
            num_tokens_for_logprob_per_req=1,
        )
        runner = self.draft_runner_list[0]
        if self.plan_stream is not None:
            self.plan_stream.wait_stream(torch.cuda.current_stream())
        with self.plan_stream_ctx:
            forward_batch = ForwardBatch.init_new(
                self._as_draft_extend(batch, batch_result, draft_extend_input),
                runner,
                capture_hidden_mode=CaptureHiddenMode.FULL,
                return_hidden_states_before_norm=True,
            )
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        if self.plan_stream is not None:
            torch.cuda.current_stream().wait_stream(self.plan_stream)
        select_index = self._select_index(batch, batch_result.accept_lens)
        return runner.forward(forward_batch).logits_output.next_token_logits[select_index]

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (plan_stream_ctx)
    # expect: clean
    def draft_extend_overlapped(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_tokens_per_req=self.speculative_num_steps + 1,
            num_tokens_for_logprob_per_req=1,
        )
        runner = self.draft_runner_list[0]
        if self.plan_stream is not None:
            self.plan_stream.wait_stream(torch.cuda.current_stream())
        with self.plan_stream_ctx:
            forward_batch = ForwardBatch.init_new(
                self._as_draft_extend(batch, batch_result, draft_extend_input),
                runner,
                capture_hidden_mode=CaptureHiddenMode.FULL,
                return_hidden_states_before_norm=True,
            )
            if not forward_batch.forward_mode.is_idle():
                runner._prepare_eager_forward_batch(forward_batch)
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        if self.plan_stream is not None:
            torch.cuda.current_stream().wait_stream(self.plan_stream)
        select_index = self._select_index(batch, batch_result.accept_lens)
        return runner.forward(forward_batch).logits_output.next_token_logits[select_index]

    def _as_draft_extend(self, batch: ScheduleBatch, batch_result, draft_extend_input):
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        bs = len(batch.seq_lens)
        batch.spec_info = draft_extend_input
        batch.input_ids = batch_result.next_token_ids
        batch.prefix_lens = batch.seq_lens.to(torch.int32)
        batch.extend_lens = torch.full(
            (bs,), self.speculative_num_draft_tokens, dtype=torch.int32, device=batch.seq_lens.device
        )
        batch.extend_num_tokens = bs * self.speculative_num_draft_tokens
        batch.forward_mode = (
            ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DRAFT_EXTEND_V2
        )
        return batch

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_prefill
    # expect: SG106
    def draft_extend_for_prefill(self, batch: ScheduleBatch, target_hidden_states, next_token_ids):
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=target_hidden_states,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        runner = self.draft_runner_list[0]
        forward_batch = ForwardBatch.init_new(
            batch,
            runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=True,
        )
        forward_batch.return_logprob = False
        if not forward_batch.forward_mode.is_idle():
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = runner.forward(forward_batch).logits_output
        return fast_topk(
            torch.softmax(logits_output.next_token_logits, dim=-1), self.topk, dim=-1
        )

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_prefill
    # expect: clean
    def draft_extend_after_prefill(self, batch: ScheduleBatch, target_hidden_states, next_token_ids):
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=target_hidden_states,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        runner = self.draft_runner_list[0]
        forward_batch = ForwardBatch.init_new(
            batch,
            runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=True,
        )
        forward_batch.return_logprob = False
        if not forward_batch.forward_mode.is_idle():
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(**replan_kwargs_for(forward_batch))
        logits_output = runner.forward(forward_batch).logits_output
        return fast_topk(
            torch.softmax(logits_output.next_token_logits, dim=-1), self.topk, dim=-1
        )

    def _staged_plan_possible(self, batch: ScheduleBatch) -> bool:
        runner = self.cuda_graph_runner_for_draft_extend
        return (
            runner is not None
            and not batch.forward_mode.is_idle()
            and len(batch.seq_lens) <= runner.max_bs
        )

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_plan_for_decode
    # expect: SG106
    def draft_extend_staged(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        staged = self._staged_plan_possible(batch)
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                EagleDraftExtendInput(
                    hidden_states=batch_result.logits_output.hidden_states,
                    num_tokens_per_req=self.speculative_num_steps + 1,
                    num_tokens_for_logprob_per_req=1,
                ),
                batch,
                batch_result.next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner_list[0],
                None,
                return_hidden_states_before_norm=True,
            )
        if not staged:
            forward_batch.forward_metadata_ready = False
        select_index = self._select_index(batch, batch_result.accept_lens)
        out = self.draft_runner_list[0].forward(forward_batch).logits_output
        return out.next_token_logits[select_index]

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_plan_for_decode
    # expect: clean
    def draft_extend_staged_v2(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        staged = self._staged_plan_possible(batch) and not require_mlp_sync()
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                EagleDraftExtendInput(
                    hidden_states=batch_result.logits_output.hidden_states,
                    num_tokens_per_req=self.speculative_num_steps + 1,
                    num_tokens_for_logprob_per_req=1,
                ),
                batch,
                batch_result.next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner_list[0],
                None,
                return_hidden_states_before_norm=True,
            )
        if not staged:
            forward_batch.forward_metadata_ready = False
        select_index = self._select_index(batch, batch_result.accept_lens)
        out = self.draft_runner_list[0].forward(forward_batch).logits_output
        return out.next_token_logits[select_index]
