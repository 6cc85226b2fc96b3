"""EAGLE v2 draft-worker patches.

The fork runs the eager draft-extend on its own (no draft-extend CUDA graph on
our MLA deployments) and experiments with planning that batch early, on the
plan stream, to overlap the plan with the tail of target verify.
"""

import logging
from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.async_probe import maybe_detect_nan
from sglang.srt.utils.common import fast_topk

from blindsg24.common.flags import FORK_FLAGS

logger = logging.getLogger(__name__)


class _DraftExtendBatchMixin:
    """Builds the eager draft-extend ForwardBatch (no planning here)."""

    def _build_decode_draft_extend_batch(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
    ) -> ForwardBatch:
        num_draft_tokens = self.speculative_num_draft_tokens
        bs = len(batch.seq_lens)
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=num_draft_tokens,
            num_tokens_for_logprob_per_req=num_draft_tokens,
        )
        batch.input_ids = batch_result.next_token_ids.to(torch.int64)
        batch.forward_mode = (
            ForwardMode.IDLE
            if batch.forward_mode.is_idle()
            else ForwardMode.DRAFT_EXTEND_V2
        )
        batch.prefix_lens = batch.seq_lens.to(torch.int32)
        batch.extend_lens = torch.full(
            (bs,), num_draft_tokens, dtype=torch.int32, device=batch.seq_lens.device
        )
        batch.extend_num_tokens = bs * num_draft_tokens
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )
        forward_batch.seq_lens = forward_batch.seq_lens + num_draft_tokens
        forward_batch.extend_seq_lens_cpu = [num_draft_tokens] * bs
        return forward_batch

    def _select_last_accepted(self, batch: ScheduleBatch, batch_result, logits_output):
        select_index = (
            torch.arange(len(batch.seq_lens), device=self.device)
            * self.speculative_num_draft_tokens
            + batch_result.accept_lens
            - 1
        )
        next_logits = logits_output.next_token_logits[select_index]
        hidden = logits_output.hidden_states[select_index]
        probs = torch.softmax(next_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        nxt = batch_result.next_draft_input
        nxt.topk_p, nxt.topk_index, nxt.hidden_states = topk_p, topk_index, hidden


class ForkEagleDraftWorker(_DraftExtendBatchMixin, EagleDraftWorker):
    """Eager draft paths planned ahead of the forward."""

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (eager branch)
    # expect: SG106
    def draft_tree(self, batch: ScheduleBatch):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_graph, kv_loc_plan = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if can_run_graph:
            parent_list, top_scores_index, draft_tokens, _ = (
                self.cuda_graph_runner.execute(forward_batch)
            )
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                # Plan all draft steps once for the live batch.
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            parent_list, top_scores_index, draft_tokens, _ = self.draft_forward(
                forward_batch
            )
        return parent_list, top_scores_index, draft_tokens, kv_loc_plan

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode + eagle_worker_common.prepare_for_draft_extend
    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan=None,
    ):
        with self.plan_stream_ctx:
            forward_batch = self._build_decode_draft_extend_batch(batch, batch_result)
            if not forward_batch.forward_mode.is_idle():
                # Overlap the plan with the verify tail.
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        maybe_detect_nan(logits_output.next_token_logits, "fork draft_extend_for_decode")
        self._select_last_accepted(batch, batch_result, logits_output)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill
    # expect: SG106
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
        kv_loc_plan=None,
    ):
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=target_hidden_states,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
            kv_loc_plan=kv_loc_plan,
        )
        forward_batch.return_logprob = False
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        return EagleDraftInput(
            topk_p=topk_p,
            topk_index=topk_index,
            hidden_states=logits_output.hidden_states,
            bonus_tokens=next_token_ids,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )

    # idiom: sglang-0.5.6/sglang/srt/speculative/eagle_worker_v2.py forward_draft_extend_after_decode (skip_attn_backend_init=True)
    # expect: SG106
    def draft_extend_legacy_skip(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        forward_batch = self._build_decode_draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        # Older call style kept from our 0.5.6 port.
        out = self.draft_runner.forward(forward_batch, skip_attn_backend_init=True)
        self._select_last_accepted(batch, batch_result, out.logits_output)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (plan_stream_ctx)
    # expect: SG106
    def draft_extend_flagged(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        forward_batch = self._build_decode_draft_extend_batch(batch, batch_result)
        if FORK_FLAGS.preplan_draft_extend and not forward_batch.forward_mode.is_idle():
            with self.plan_stream_ctx:
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            if self.plan_stream:
                torch.get_device_module(self.device).current_stream().wait_stream(
                    self.plan_stream
                )
        out = self.draft_runner.forward(forward_batch)
        self._select_last_accepted(batch, batch_result, out.logits_output)


class ForkEagleDraftWorkerFixed(_DraftExtendBatchMixin, EagleDraftWorker):
    """Same paths after the DP-attention review."""

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft + draft_forward; model_runner._forward_raw (pad, eager execute, unpad)
    # expect: clean
    def draft_tree(self, batch: ScheduleBatch):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_graph, kv_loc_plan = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if can_run_graph:
            parent_list, top_scores_index, draft_tokens, _ = (
                self.cuda_graph_runner.execute(forward_batch)
            )
            return parent_list, top_scores_index, draft_tokens, kv_loc_plan

        # DP padding first, so the multi-step plan sees the final shapes.
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        if not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        spec_info = forward_batch.spec_info
        topk_p, topk_index = spec_info.topk_p, spec_info.topk_index
        hidden_states = spec_info.hidden_states
        scores = None
        score_list, token_list, parents_list = [], [], []
        for i in range(self.speculative_num_steps):
            input_ids, hidden_states, scores, tree_info = select_top_k_tokens(
                i, topk_p, topk_index, hidden_states, scores, self.topk
            )
            score_list.append(tree_info[0])
            token_list.append(tree_info[1])
            parents_list.append(tree_info[2])
            if i == self.speculative_num_steps - 1:
                break
            forward_batch.input_ids = input_ids
            spec_info.hidden_states = hidden_states
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                logits_output = self.draft_runner.eager_runner.execute(forward_batch)
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            hidden_states = logits_output.hidden_states
            forward_batch.positions.add_(1)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(logits_output)

        parent_list, top_scores_index, draft_tokens = organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )
        return parent_list, top_scores_index, draft_tokens, kv_loc_plan

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode; forward_batch_info.mark_forward_metadata_ready(replan_equivalent=True)
    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan=None,
    ):
        with self.plan_stream_ctx:
            forward_batch = self._build_decode_draft_extend_batch(batch, batch_result)
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                # The runner plans with this same backend, so a post-pad
                # re-plan is equivalent: let it re-plan if padding grows us.
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._select_last_accepted(batch, batch_result, logits_output)

    # idiom: sglang/srt/speculative/dflash_info.py DFlashVerifyInput.prepare_for_verify (plan without marking)
    # expect: clean
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
        kv_loc_plan=None,
    ):
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=target_hidden_states,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
            kv_loc_plan=kv_loc_plan,
        )
        forward_batch.return_logprob = False
        if not forward_batch.forward_mode.is_idle():
            # Warm the backend's index buffers on the live batch. Left
            # unmarked: the runner plans again after its own padding.
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        return EagleDraftInput(
            topk_p=topk_p,
            topk_index=topk_index,
            hidden_states=logits_output.hidden_states,
            bonus_tokens=next_token_ids,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )

    # idiom: sglang/srt/model_executor/forward_batch_info.py ForwardBatch.apply_deprecated_skip_attn_backend_init (False maps to nothing)
    # expect: clean
    def draft_extend_legacy_skip(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        forward_batch = self._build_decode_draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        # skip=False: the runner re-plans the (possibly padded) batch itself.
        out = self.draft_runner.forward(forward_batch, skip_attn_backend_init=False)
        self._select_last_accepted(batch, batch_result, out.logits_output)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode; model_runner._prepare_eager_forward_batch (pads only when global_num_tokens_cpu is set)
    # expect: clean
    def draft_extend_flagged(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        forward_batch = self._build_decode_draft_extend_batch(batch, batch_result)
        # Only a rank-local batch (never MLP-synced) keeps its shape through
        # the runner, so only that one may be planned early.
        if (
            FORK_FLAGS.preplan_draft_extend
            and not forward_batch.forward_mode.is_idle()
            and forward_batch.global_num_tokens_cpu is None
        ):
            with self.plan_stream_ctx:
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            if self.plan_stream:
                torch.get_device_module(self.device).current_stream().wait_stream(
                    self.plan_stream
                )
        out = self.draft_runner.forward(forward_batch)
        self._select_last_accepted(batch, batch_result, out.logits_output)
