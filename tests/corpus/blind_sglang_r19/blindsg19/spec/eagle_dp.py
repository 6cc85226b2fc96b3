"""EAGLE draft workers tuned for DP-attention deployments.

Fork-local subclasses of :class:`EagleDraftWorker` that change how the draft
and draft-extend batches are planned when the draft cuda graphs cannot be
replayed (mixed graph votes across DP ranks, oversize batches, grammar)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
    prepare_for_draft_extend,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import fast_topk

logger = logging.getLogger(__name__)


def _select_index(batch: ScheduleBatch, accept_lens: torch.Tensor, width: int):
    bs = len(batch.seq_lens)
    return (
        torch.arange(0, bs * width, width, device=accept_lens.device)
        + accept_lens
        - 1
    )


class DPAttnEagleDraftWorker(EagleDraftWorker):
    """Draft worker that honours the DP-wide draft graph vote."""

    # expect: SG106
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = prepare_for_draft(
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
        # Every DP rank has to agree before any of them replays: the graph
        # body holds the MoE collectives. A rank outvoted by its peers runs
        # the draft steps eagerly.
        if (
            forward_batch.global_num_tokens_cpu is not None
            and not forward_batch.can_run_dp_draft_cuda_graph
        ):
            can_run_decode_cuda_graph = False

        if can_run_decode_cuda_graph:
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
                # One multi-step plan covers all draft steps.
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )

        verify_input = build_eagle_verify_input(
            batch,
            draft_input,
            parent_list,
            top_scores_index,
            draft_tokens,
            draft_probs,
            target_worker=self.target_worker,
            topk=self.topk,
            num_steps=self.speculative_num_steps,
            num_draft_tokens=self.speculative_num_draft_tokens,
            tree_mask_mode=self.tree_mask_mode,
            device=self.device,
        )
        if kv_loc_plan is not None:
            verify_input.kv_loc_plan = kv_loc_plan
            verify_input.prepared_out_cache_loc = kv_loc_plan.write_virtual
        if with_topology:
            return verify_input, parent_list, top_scores_index
        return verify_input

    # expect: clean
    def _draft_prepadded(self, forward_batch: ForwardBatch):
        """Eager multi-step draft for a DP rank.

        The batch is brought to its DP-padded shape first, so the single
        multi-step plan below already describes the rows every step's
        forward runs; the runner's own padding then finds nothing to add.
        """
        raw_bs = forward_batch.batch_size
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        if not forward_batch.forward_mode.is_idle() and self.speculative_num_steps > 1:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        parent_list, top_scores_index, draft_tokens, draft_probs = self.draft_forward(
            forward_batch
        )
        if parent_list is None:
            return None, None, None, None
        return (
            parent_list[:raw_bs],
            top_scores_index[:raw_bs],
            draft_tokens[:raw_bs],
            draft_probs[:raw_bs] if draft_probs is not None else None,
        )

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        num_draft_tokens = self.speculative_num_draft_tokens
        accept_lens = batch_result.accept_lens
        select_index = _select_index(batch, accept_lens, num_draft_tokens)
        next_token_ids = batch_result.next_token_ids.to(torch.int64)

        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=accept_lens - 1,
            num_accept_tokens=accept_lens,
            num_tokens_per_req=num_draft_tokens,
            num_tokens_for_logprob_per_req=num_draft_tokens,
        )
        graph_runner = self.cuda_graph_runner_for_draft_extend
        # prepare_for_draft_extend pre-plans the batch on the draft runner's
        # backend whenever it will not replay the draft-extend graph.
        forward_batch = prepare_for_draft_extend(
            draft_extend_input,
            batch,
            next_token_ids,
            num_draft_tokens,
            self.draft_runner,
            graph_runner,
            return_hidden_states_before_norm=False,
            kv_loc_plan=kv_loc_plan,
        )
        can_run_graph = graph_runner is not None and graph_runner.can_run_graph(
            forward_batch
        )
        if can_run_graph:
            logits_output = graph_runner.execute(forward_batch, select_index)
        else:
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            logits_output.next_token_logits = logits_output.next_token_logits[
                select_index
            ]
            if logits_output.hidden_states is not None:
                logits_output.hidden_states = logits_output.hidden_states[
                    select_index
                ]

        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = topk_p
        next_draft_input.topk_index = topk_index
        next_draft_input.hidden_states = logits_output.hidden_states

    # expect: clean
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        if not batch.forward_mode.is_idle():
            # Shift each request's prompt left by one and append its sampled
            # token, as the draft model predicts the token after each one.
            new_input_ids = torch.empty_like(batch.input_ids)
            pt = 0
            for i, extend_len in enumerate(batch.extend_lens):
                ids = batch.input_ids[pt : pt + extend_len]
                new_input_ids[pt : pt + extend_len].copy_(
                    torch.cat((ids[1:], next_token_ids[i].reshape(1)))
                )
                pt += extend_len
            batch.input_ids = new_input_ids

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
            # Planned on the runner's own backend, so the runner may re-plan
            # this batch itself should the DP padding reshape it.
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
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


class PrefillSeededEagleDraftWorker(EagleDraftWorker):
    """Draft worker whose prefill draft-extend is planned while the target's
    logits are still being sampled."""

    # expect: SG106
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        if not batch.forward_mode.is_idle():
            new_input_ids = torch.empty_like(batch.input_ids)
            offsets = torch.cumsum(
                torch.tensor(batch.extend_lens, device=batch.input_ids.device), 0
            )
            new_input_ids[:-1].copy_(batch.input_ids[1:])
            new_input_ids[offsets - 1] = next_token_ids.to(new_input_ids.dtype)
            batch.input_ids = new_input_ids

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
        if mm_input_embeds is not None:
            forward_batch.mm_input_embeds = mm_input_embeds
        forward_batch.return_logprob = False

        if not forward_batch.forward_mode.is_idle():
            # Plan now, overlapping the host work with the target's sampling;
            # the forward below then skips its own init.
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


class LegacyFlagDraftWorker(EagleDraftWorker):
    """Keeps the pre-marker `skip_attn_backend_init` contract of older forks."""

    # expect: SG106
    def _draft_step_legacy(
        self,
        batch: ScheduleBatch,
        draft_input: EagleDraftInput,
        input_ids: torch.Tensor,
    ) -> torch.Tensor:
        """Single-step draft decode used when speculative_num_steps == 2."""
        batch.spec_info = draft_input
        batch.input_ids = input_ids
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
        )
        skip_attn_backend_init = False
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            skip_attn_backend_init = True
        forward_batch.apply_deprecated_skip_attn_backend_init(skip_attn_backend_init)
        out = self.draft_runner.forward(forward_batch)
        return out.logits_output.next_token_logits


class RebindingDraftWorker(EagleDraftWorker):
    """Reuses one planned draft-extend batch across spec_info rebinds."""

    # expect: SG106
    def _draft_extend_rebind(
        self,
        forward_batch: ForwardBatch,
        hidden_states: torch.Tensor,
        select_index: torch.Tensor,
    ):
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        # Rebind the target hidden states without re-planning: the shapes
        # are unchanged, so the plan (and its mark) carry over to the copy.
        spec_info = dataclasses.replace(
            forward_batch.spec_info, hidden_states=hidden_states
        )
        rebound = dataclasses.replace(forward_batch, spec_info=spec_info)
        logits_output = self.draft_runner.forward(rebound).logits_output
        return logits_output.next_token_logits[select_index]


class ReMarkingDraftWorker(EagleDraftWorker):
    """Uses the stock draft-extend preparation but lets the runner re-plan."""

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        num_draft_tokens = self.speculative_num_draft_tokens
        accept_lens = batch_result.accept_lens
        select_index = _select_index(batch, accept_lens, num_draft_tokens)
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=accept_lens - 1,
            num_accept_tokens=accept_lens,
            num_tokens_per_req=num_draft_tokens,
            num_tokens_for_logprob_per_req=num_draft_tokens,
        )
        graph_runner = self.cuda_graph_runner_for_draft_extend
        forward_batch = prepare_for_draft_extend(
            draft_extend_input,
            batch,
            batch_result.next_token_ids.to(torch.int64),
            num_draft_tokens,
            self.draft_runner,
            graph_runner,
            return_hidden_states_before_norm=False,
            kv_loc_plan=kv_loc_plan,
        )
        can_run_graph = graph_runner is not None and graph_runner.can_run_graph(
            forward_batch
        )
        if can_run_graph:
            logits_output = graph_runner.execute(forward_batch, select_index)
        else:
            if forward_batch.forward_metadata_ready:
                # The helper planned on this runner's backend: opt in to the
                # post-pad re-plan instead of trusting the pre-pad metadata.
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            logits_output.next_token_logits = logits_output.next_token_logits[
                select_index
            ]
            if logits_output.hidden_states is not None:
                logits_output.hidden_states = logits_output.hidden_states[
                    select_index
                ]

        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = topk_p
        next_draft_input.topk_index = topk_index
        next_draft_input.hidden_states = logits_output.hidden_states
