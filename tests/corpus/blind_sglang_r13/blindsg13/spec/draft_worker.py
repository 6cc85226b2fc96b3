"""EAGLE v2 draft worker with a few fork-local draft / draft-extend paths."""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
    prepare_for_draft_extend,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

logger = logging.getLogger(__name__)


class PaddedAwareEagleDraftWorker(EagleDraftWorker):
    """EagleDraftWorker with fork-local eager paths.

    ``draft_extend_replan_equivalent`` says whether the draft-extend pre-plan
    may be redone by the forward path on a reshaped (DP-padded) batch.
    """

    draft_extend_replan_equivalent: bool = False

    def _build_verify_input(self, batch, draft_input, parent_list, scores, tokens, probs):
        return build_eagle_verify_input(
            batch,
            draft_input,
            parent_list,
            scores,
            tokens,
            probs,
            target_worker=self.target_worker,
            topk=self.topk,
            num_steps=self.speculative_num_steps,
            num_draft_tokens=self.speculative_num_draft_tokens,
            tree_mask_mode=self.tree_mask_mode,
            device=self.device,
        )

    def _draft_extend_select_index(self, batch: ScheduleBatch, accept_lens):
        return (
            torch.arange(
                0,
                len(batch.seq_lens) * self.speculative_num_draft_tokens,
                self.speculative_num_draft_tokens,
                device=self.device,
            )
            + accept_lens
            - 1
        )

    def _new_draft_extend_batch(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ) -> ForwardBatch:
        """Build (but do not plan) the draft-extend forward batch."""
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        batch.input_ids = batch_result.next_token_ids.to(torch.int64)
        batch.forward_mode = (
            ForwardMode.IDLE
            if batch.forward_mode.is_idle()
            else ForwardMode.DRAFT_EXTEND_V2
        )
        return ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )

    # ------------------------------------------------------------------
    # Draft (multi-step decode)
    # ------------------------------------------------------------------

    # expect: SG106
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_cuda_graph, kv_loc_plan = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
            target_translator=self.target_worker.model_runner.kv_index_translator,
            num_draft_tokens=self.speculative_num_draft_tokens,
        )
        if can_run_cuda_graph:
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.cuda_graph_runner.execute(forward_batch)
            )
            if draft_probs is not None:
                draft_probs = draft_probs.clone()
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )

        verify_input = self._build_verify_input(
            batch, draft_input, parent_list, top_scores_index, draft_tokens, draft_probs
        )
        if kv_loc_plan is not None:
            verify_input.kv_loc_plan = kv_loc_plan
            verify_input.prepared_out_cache_loc = kv_loc_plan.write_virtual
        if with_topology:
            return verify_input, parent_list, top_scores_index
        return verify_input

    # expect: clean
    def draft_pad_first(self, batch: ScheduleBatch):
        """Eager draft that pads for DP attention before the multi-step plan."""
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_cuda_graph, _ = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if can_run_cuda_graph:
            outs = self.cuda_graph_runner.execute(forward_batch)
        else:
            if forward_batch.global_num_tokens_cpu is not None:
                # Pad now so the multi-step plan below sees the final shapes;
                # the runner's own MLP-sync pass is then a no-op.
                forward_batch.prepare_mlp_sync_batch(self.draft_runner)
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            outs = self.draft_forward(forward_batch)
        parent_list, top_scores_index, draft_tokens, draft_probs = outs
        return self._build_verify_input(
            batch, draft_input, parent_list, top_scores_index, draft_tokens, draft_probs
        )

    # expect: SG106
    def draft_legacy_skip_flag(self, batch: ScheduleBatch):
        """Old-style multi-step draft loop kept for the 0.5.6 checkpoints."""
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, _, _ = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            None,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if forward_batch.forward_mode.is_idle():
            return None
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        hidden_states = draft_input.hidden_states
        topk_index = draft_input.topk_index
        logits = []
        for i in range(self.speculative_num_steps - 1):
            forward_batch.input_ids = topk_index.flatten()
            draft_input.hidden_states = hidden_states
            out = self.draft_runner.forward(forward_batch, skip_attn_backend_init=True)
            logits.append(out.logits_output.next_token_logits)
            hidden_states = out.logits_output.hidden_states
            topk_index = torch.argmax(logits[-1], dim=-1, keepdim=True)
            forward_batch.positions.add_(1)
        return logits

    # ------------------------------------------------------------------
    # Draft extend (decode side)
    # ------------------------------------------------------------------

    # expect: SG106
    def draft_extend_eager(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
    ):
        """Draft extend that never replays a graph (debug / NaN bisection)."""
        num_correct_drafts = batch_result.accept_lens - 1
        select_index = self._draft_extend_select_index(batch, batch_result.accept_lens)
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=num_correct_drafts,
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
            None,  # no graph runner: always the eager (pre-planned) path
            return_hidden_states_before_norm=False,
        )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        return logits_output

    # expect: clean
    def draft_extend_unplanned(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
    ):
        """Eager draft extend that leaves planning to the forward (post-pad)."""
        select_index = self._draft_extend_select_index(batch, batch_result.accept_lens)
        forward_batch = self._new_draft_extend_batch(batch, batch_result)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        return logits_output

    # expect: SG106
    def draft_extend_with_kwargs(self, forward_batch: ForwardBatch):
        backend = self.draft_runner.attn_backend
        fwd_kwargs = dict(skip_attn_backend_init=True)
        if not forward_batch.forward_mode.is_idle():
            backend.init_forward_metadata(forward_batch)
        return self.draft_runner.forward(forward_batch, **fwd_kwargs).logits_output

    # expect: clean
    def draft_extend_with_default_kwargs(self, forward_batch: ForwardBatch):
        """Warm the backend early; the deprecated flag is left unset (None), so
        nothing is marked and the forward plans the padded batch itself."""
        backend = self.draft_runner.attn_backend
        fwd_kwargs = {"skip_attn_backend_init": None}
        if not forward_batch.forward_mode.is_idle():
            backend.init_forward_metadata(forward_batch)
        return self.draft_runner.forward(forward_batch, **fwd_kwargs).logits_output

    # expect: SG106
    def draft_extend_partial_plan(self, forward_batch: ForwardBatch):
        plan = functools.partial(
            self.draft_runner.attn_backend.init_forward_metadata, forward_batch
        )
        plan()
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_class_flag(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=self.draft_extend_replan_equivalent
        )
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_raw_flag(self, forward_batch: ForwardBatch):
        """Marks by hand (predates mark_forward_metadata_ready)."""
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.forward_metadata_ready = True
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_dsa_unmark(self, forward_batch: ForwardBatch):
        """Plan early for the DSA indexer warmup, then drop the mark."""
        backend = self.draft_runner.attn_backend
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if self.seed_dsa_topk_from_draft_extend:
            forward_batch.spec_info.dsa_seed_topk_capture = (
                self._get_dsa_extend_topk_buf(forward_batch.input_ids.shape[0])
            )
        # DP padding happens inside forward; do not keep the pre-pad plan.
        forward_batch.forward_metadata_ready = False
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_downgraded(self, forward_batch: ForwardBatch):
        backend = self.draft_runner.attn_backend
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        # DSA's indexer cannot rebuild its schedule on a padded batch (#27091):
        # opt back out of the forward-path re-plan.
        forward_batch.forward_metadata_replan_equivalent = False
        return self.draft_runner.forward(forward_batch).logits_output


    # expect: SG106
    def draft_extend_preplan_without_graphs(self, forward_batch: ForwardBatch):
        """With --disable-cuda-graph every draft extend is eager; pre-plan it so
        the host work overlaps the target's sampling."""
        args = self.server_args
        if (
            not args.enable_dp_attention or args.disable_cuda_graph
        ) and not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_preplan_without_dp(self, forward_batch: ForwardBatch):
        """Pre-plan only when DP attention (and so MLP-sync padding) is off."""
        if (
            not self.server_args.enable_dp_attention
            and not forward_batch.forward_mode.is_idle()
        ):
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output


class ReplanningEagleDraftWorker(PaddedAwareEagleDraftWorker):
    """Variant for non-DSA drafts: a forward-path re-plan is equivalent."""

    draft_extend_replan_equivalent: bool = True

    # expect: clean
    def draft_extend_replanning(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=self.draft_extend_replan_equivalent
        )
        return self.draft_runner.forward(forward_batch).logits_output
