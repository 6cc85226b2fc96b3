"""Draft-extend overrides (after-verify refill and prefill) for DP attention.

Ported from our 0.5.18 fork; the extend batch is prepared with the upstream
``prepare_for_draft_extend`` helper and then handed to the draft runner.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import torch

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
)
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import (
    EAGLEDraftExtendCudaGraphRunner,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft_extend
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.utils.common import fast_topk, require_mlp_sync


def _select_rows(worker, batch, batch_result):
    select_index = (
        torch.arange(
            0,
            len(batch.seq_lens) * worker.speculative_num_draft_tokens,
            worker.speculative_num_draft_tokens,
            device=worker.device,
        )
        + batch_result.accept_lens
        - 1
    )
    return select_index


def _finish_extend(worker, batch_result, logits_output, select_index):
    logits_output.next_token_logits = logits_output.next_token_logits[select_index]
    if logits_output.hidden_states is not None:
        logits_output.hidden_states = logits_output.hidden_states[select_index]
    probs = torch.softmax(logits_output.next_token_logits, dim=-1)
    topk_p, topk_index = fast_topk(probs, worker.topk, dim=-1)
    nxt = batch_result.next_draft_input
    nxt.topk_p, nxt.topk_index, nxt.hidden_states = (
        topk_p,
        topk_index,
        logits_output.hidden_states,
    )


class EagerDraftExtendWorker(EagleDraftWorker):
    """Refill after verify without the plan-stream overlap (the extend batch
    is small; overlapping cost more than it saved on H20)."""

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan=None,
    ):
        select_index = _select_rows(self, batch, batch_result)
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
            None,  # eager only
            return_hidden_states_before_norm=False,
            kv_loc_plan=kv_loc_plan,
        )
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        _finish_extend(self, batch_result, logits_output, select_index)


class RefillDraftExtendWorker(EagleDraftWorker):
    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan=None,
    ):
        select_index = _select_rows(self, batch, batch_result)
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
            None,  # eager only
            return_hidden_states_before_norm=False,
            kv_loc_plan=kv_loc_plan,
        )
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self.draft_runner)
            # The helper planned the local rows; let the runner plan the
            # synced batch (same backend object, flashinfer has no DSA state).
            forward_batch.forward_metadata_ready = False
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        _finish_extend(self, batch_result, logits_output, select_index)


class OverlapRefillDraftWorker(EagleDraftWorker):
    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan=None,
    ):
        select_index = _select_rows(self, batch, batch_result)
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                draft_extend_input,
                batch,
                batch_result.next_token_ids.to(torch.int64),
                self.speculative_num_draft_tokens,
                self.draft_runner,
                None,
                return_hidden_states_before_norm=False,
                kv_loc_plan=kv_loc_plan,
            )
            # Our extend backend is plain flashinfer: the runner's own plan is
            # equivalent, so allow it to re-plan when MLP sync reshapes us.
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        _finish_extend(self, batch_result, logits_output, select_index)


class OverlappedMTPDraftWorker(MultiLayerEagleDraftWorker):
    """Plans the MTP prefill-extend once up front so the per-step loop only
    launches kernels."""

    # expect: SG106
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        kv_loc_plan=None,
    ):
        extend_input = EagleDraftExtendInput(
            hidden_states=target_hidden_states,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        batch.spec_info = extend_input
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner_list[0],
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=True,
            kv_loc_plan=kv_loc_plan,
        )
        if not forward_batch.forward_mode.is_idle():
            for runner in self.draft_runner_list:
                runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            step_forward_batch = replace(forward_batch)
            if require_mlp_sync():
                step_forward_batch.prepare_mlp_sync_batch(runner)
            output = runner.forward(step_forward_batch)
            probs = torch.softmax(output.logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)

        return EagleDraftInput(
            topk_p=torch.cat(topk_p_list, dim=1),
            topk_index=torch.cat(topk_index_list, dim=1),
            hidden_states=extend_input.hidden_states,
            bonus_tokens=next_token_ids,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )


class PerStepMTPDraftWorker(MultiLayerEagleDraftWorker):
    # expect: clean
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        kv_loc_plan=None,
    ):
        extend_input = EagleDraftExtendInput(
            hidden_states=target_hidden_states,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        batch.spec_info = extend_input
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner_list[0],
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=True,
            kv_loc_plan=kv_loc_plan,
        )

        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            step_forward_batch = replace(forward_batch)
            if require_mlp_sync():
                # Synced shapes only exist after the pad; the runner's forward
                # plans them (batch stays unmarked on this path).
                step_forward_batch.prepare_mlp_sync_batch(runner)
            elif not step_forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(step_forward_batch)
                # Same backend the runner would plan with; let it re-plan if
                # the attn-TP scatter pads the extend.
                step_forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            output = runner.forward(step_forward_batch)
            probs = torch.softmax(output.logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)

        return EagleDraftInput(
            topk_p=torch.cat(topk_p_list, dim=1),
            topk_index=torch.cat(topk_index_list, dim=1),
            hidden_states=extend_input.hidden_states,
            bonus_tokens=next_token_ids,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )


class LeanDraftExtendGraphRunner(EAGLEDraftExtendCudaGraphRunner):
    """Trimmed replay: drops the mrope / mamba / DSA bookkeeping we never use."""

    # expect: SG106
    def execute(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        buffers = self.buffers
        raw_bs = forward_batch.batch_size
        num_tokens = forward_batch.input_ids.shape[0]
        bs = self._pad_to_bucket(raw_bs, self.capture_bs)

        # Attention metadata for this replay, built from the live batch.
        self.draft_extend_attn_backend.init_forward_metadata_out_graph(forward_batch)

        if bs * self.captured_req_width != num_tokens:
            buffers.seq_lens.fill_(self.seq_len_fill_value)
            buffers.out_cache_loc.zero_()
            buffers.positions.zero_()
            buffers.req_pool_indices.zero_()
            buffers.extend_seq_lens.fill_(self.captured_req_width)
        buffers.input_ids[:num_tokens].copy_(forward_batch.input_ids)
        buffers.seq_lens[:raw_bs].copy_(forward_batch.seq_lens)
        buffers.out_cache_loc[:num_tokens].copy_(forward_batch.out_cache_loc)
        buffers.positions[:num_tokens].copy_(forward_batch.positions)
        buffers.req_pool_indices[:raw_bs].copy_(forward_batch.req_pool_indices)
        buffers.select_index[:raw_bs].copy_(select_index)
        if forward_batch.spec_info.hidden_states is not None:
            buffers.hidden_states[:num_tokens].copy_(
                forward_batch.spec_info.hidden_states
            )

        self.raw_bs = raw_bs
        self.bs = bs
        out = self._replay_graph(self._make_graph_key(bs), forward_batch)
        return LogitsProcessorOutput(
            next_token_logits=out.next_token_logits[:raw_bs],
            hidden_states=out.hidden_states[:raw_bs].clone(),
        )


class CompactDraftExtendGraphRunner(EAGLEDraftExtendCudaGraphRunner):
    # expect: clean
    def execute(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        buffers = self.buffers
        raw_bs = forward_batch.batch_size
        num_tokens = forward_batch.input_ids.shape[0]
        bs = self._pad_to_bucket(raw_bs, self.capture_bs)

        if bs * self.captured_req_width != num_tokens:
            buffers.seq_lens.fill_(self.seq_len_fill_value)
            buffers.out_cache_loc.zero_()
            buffers.positions.zero_()
            buffers.req_pool_indices.zero_()
            buffers.extend_seq_lens.fill_(self.captured_req_width)
        buffers.input_ids[:num_tokens].copy_(forward_batch.input_ids)
        buffers.seq_lens[:raw_bs].copy_(forward_batch.seq_lens)
        buffers.out_cache_loc[:num_tokens].copy_(forward_batch.out_cache_loc)
        buffers.positions[:num_tokens].copy_(forward_batch.positions)
        buffers.req_pool_indices[:raw_bs].copy_(forward_batch.req_pool_indices)
        buffers.select_index[:raw_bs].copy_(select_index)
        if forward_batch.spec_info.hidden_states is not None:
            buffers.hidden_states[:num_tokens].copy_(
                forward_batch.spec_info.hidden_states
            )

        seq_lens_sum = forward_batch.seq_lens_sum
        if seq_lens_sum is not None:
            seq_lens_sum += (bs - raw_bs) * self.seq_len_fill_value
        fb_view = SimpleNamespace(
            batch_size=bs,
            forward_mode=self.forward_mode,
            input_ids=forward_batch.input_ids,
            req_pool_indices=buffers.req_pool_indices,
            seq_lens=buffers.seq_lens,
            seq_lens_sum=seq_lens_sum,
            seq_lens_cpu=(
                None if forward_batch.seq_lens_cpu is None else buffers.seq_lens_cpu
            ),
            encoder_lens=None,
            out_cache_loc=buffers.out_cache_loc[:num_tokens],
            out_cache_loc_virtual=forward_batch.out_cache_loc_virtual,
            kv_loc_plan=forward_batch.kv_loc_plan,
            kv_loc_cols=forward_batch.kv_loc_cols,
            spec_info=forward_batch.spec_info,
        )
        self.draft_extend_attn_backend.init_forward_metadata_out_graph(fb_view)

        self.raw_bs = raw_bs
        self.bs = bs
        out = self._replay_graph(self._make_graph_key(bs), forward_batch)
        return LogitsProcessorOutput(
            next_token_logits=out.next_token_logits[:raw_bs],
            hidden_states=out.hidden_states[:raw_bs].clone(),
        )
