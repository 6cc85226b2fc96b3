"""EAGLE v2 draft-decode overrides for DP-attention deployments.

The stock ``EagleDraftWorker.draft`` leaves the DP padding to
``ModelRunner._forward_raw``; on our clusters the first draft step of every
rank has to agree on the batch shape before the plan stream is joined, so these
workers pull the MLP-sync step forward.
"""

from __future__ import annotations

import contextlib
import functools
from typing import List

import torch

from sglang.srt.layers.dp_attention import is_dp_attention_enabled
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_info import EagleDraftInput
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.common import fast_topk

from blindsg1._dp_utils import dp_sync_active, lockstep, sync_batch_across_dp


def _verify_input_from(worker, batch, draft_input, parent_list, top_scores_index,
                       draft_tokens, draft_probs, kv_loc_plan):
    verify_input = build_eagle_verify_input(
        batch,
        draft_input,
        parent_list,
        top_scores_index,
        draft_tokens,
        draft_probs,
        target_worker=worker.target_worker,
        topk=worker.topk,
        num_steps=worker.speculative_num_steps,
        num_draft_tokens=worker.speculative_num_draft_tokens,
        tree_mask_mode=worker.tree_mask_mode,
        device=worker.device,
    )
    if kv_loc_plan is not None:
        verify_input.kv_loc_plan = kv_loc_plan
        verify_input.prepared_out_cache_loc = kv_loc_plan.write_virtual
    return verify_input


class PaddedDraftWorker(EagleDraftWorker):
    """Draft worker that syncs the DP shape right before the multi-step loop."""

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
        if can_run_decode_cuda_graph:
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.cuda_graph_runner.execute(forward_batch)
            )
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            # All DP ranks must enter the step loop with the same shape.
            sync_batch_across_dp(forward_batch, self.draft_runner)
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )
        return _verify_input_from(
            self, batch, draft_input, parent_list, top_scores_index,
            draft_tokens, draft_probs, kv_loc_plan,
        )


class EarlySyncDraftWorker(EagleDraftWorker):
    # expect: clean
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
        if can_run_decode_cuda_graph:
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.cuda_graph_runner.execute(forward_batch)
            )
        else:
            # All DP ranks must enter the step loop with the same shape; the
            # per-step plan below is sized from the synced batch.
            sync_batch_across_dp(forward_batch, self.draft_runner)
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )
        return _verify_input_from(
            self, batch, draft_input, parent_list, top_scores_index,
            draft_tokens, draft_probs, kv_loc_plan,
        )


class LockstepDraftWorker(EagleDraftWorker):
    """Plans on the plan stream and keeps the plan scoped to the step loop."""

    @contextlib.contextmanager
    def _planned(self, forward_batch: ForwardBatch):
        with self.plan_stream_ctx:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        if self.plan_stream is not None:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        forward_batch.mark_forward_metadata_ready()
        try:
            yield forward_batch
        finally:
            forward_batch.spec_info.kv_indptr = None
            forward_batch.spec_info.kv_indices = None

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
        )
        if can_run_decode_cuda_graph or forward_batch.forward_mode.is_idle():
            out = (
                self.cuda_graph_runner.execute(forward_batch)
                if can_run_decode_cuda_graph
                else self.draft_forward(forward_batch)
            )
        else:
            with self._planned(forward_batch) as fb:
                lockstep(fb, self.draft_runner)
                out = self.draft_forward(fb)
        parent_list, top_scores_index, draft_tokens, draft_probs = out
        return _verify_input_from(
            self, batch, draft_input, parent_list, top_scores_index,
            draft_tokens, draft_probs, kv_loc_plan,
        )


class PlanScopeDraftWorker(LockstepDraftWorker):
    # expect: clean
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
        )
        if can_run_decode_cuda_graph or forward_batch.forward_mode.is_idle():
            out = (
                self.cuda_graph_runner.execute(forward_batch)
                if can_run_decode_cuda_graph
                else self.draft_forward(forward_batch)
            )
        else:
            lockstep(forward_batch, self.draft_runner)
            with self._planned(forward_batch) as fb:
                out = self.draft_forward(fb)
        parent_list, top_scores_index, draft_tokens, draft_probs = out
        return _verify_input_from(
            self, batch, draft_input, parent_list, top_scores_index,
            draft_tokens, draft_probs, kv_loc_plan,
        )


class StepwiseDraftWorker(EagleDraftWorker):
    """Owns planning inside draft_forward so the graph-capture path and the
    eager path share one code path."""

    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, _, kv_loc_plan = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            None,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        parent_list, top_scores_index, draft_tokens, draft_probs = self.draft_forward(
            forward_batch
        )
        return _verify_input_from(
            self, batch, draft_input, parent_list, top_scores_index,
            draft_tokens, draft_probs, kv_loc_plan,
        )

    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info: EagleDraftInput = forward_batch.spec_info
        if forward_batch.forward_mode.is_idle():
            return self._draft_forward_idle(forward_batch, spec_info)

        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
        )
        out_cache_loc = forward_batch.out_cache_loc.reshape(
            forward_batch.batch_size, self.topk, self.speculative_num_steps
        ).permute((2, 0, 1)).reshape(self.speculative_num_steps, -1)

        score_list: List[torch.Tensor] = []
        token_list: List[torch.Tensor] = []
        parents_list: List[torch.Tensor] = []
        scores = None
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
            forward_batch.out_cache_loc = out_cache_loc[i]
            spec_info.hidden_states = hidden_states
            if i == 0 and dp_sync_active(forward_batch):
                # First step carries the DP shape for the whole chain.
                forward_batch.prepare_mlp_sync_batch(self.draft_runner)
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            forward_batch.positions.add_(1)
            hidden_states = logits_output.hidden_states

        parent_list, top_scores_index, draft_tokens = organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )
        return parent_list, top_scores_index, draft_tokens, None


class ChainedStepDraftWorker(StepwiseDraftWorker):
    # expect: clean
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info: EagleDraftInput = forward_batch.spec_info
        if forward_batch.forward_mode.is_idle():
            return self._draft_forward_idle(forward_batch, spec_info)

        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        planned_bs = forward_batch.batch_size

        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
        )
        out_cache_loc = forward_batch.out_cache_loc.reshape(
            forward_batch.batch_size, self.topk, self.speculative_num_steps
        ).permute((2, 0, 1)).reshape(self.speculative_num_steps, -1)

        score_list: List[torch.Tensor] = []
        token_list: List[torch.Tensor] = []
        parents_list: List[torch.Tensor] = []
        scores = None
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
            forward_batch.out_cache_loc = out_cache_loc[i]
            spec_info.hidden_states = hidden_states
            if i == 0 and dp_sync_active(forward_batch):
                forward_batch.prepare_mlp_sync_batch(self.draft_runner)
                if forward_batch.batch_size != planned_bs:
                    # The per-step wrappers were sized for the local rows.
                    self.draft_attn_backend.init_forward_metadata(forward_batch)
                    planned_bs = forward_batch.batch_size
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            forward_batch.positions.add_(1)
            hidden_states = logits_output.hidden_states

        parent_list, top_scores_index, draft_tokens = organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )
        return parent_list, top_scores_index, draft_tokens, None


class PartialPlanDraftWorker(EagleDraftWorker):
    """Binds the planner once at backend init; the draft loop just calls it."""

    def init_attention_backend(self):
        super().init_attention_backend()
        self._plan_draft = functools.partial(
            self._plan_and_mark, backend=self.draft_attn_backend
        )

    @staticmethod
    def _plan_and_mark(forward_batch: ForwardBatch, *, backend):
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    def _sync_dp(self, forward_batch: ForwardBatch) -> None:
        if is_dp_attention_enabled() and forward_batch.global_num_tokens_cpu:
            forward_batch.prepare_mlp_sync_batch(self.draft_runner)

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
        )
        if can_run_decode_cuda_graph:
            result = self.cuda_graph_runner.execute(forward_batch)
        else:
            if not forward_batch.forward_mode.is_idle():
                self._plan_draft(forward_batch)
            self._sync_dp(forward_batch)
            result = self.draft_forward(forward_batch)
        parent_list, top_scores_index, draft_tokens, draft_probs = result
        return _verify_input_from(
            self, batch, draft_input, parent_list, top_scores_index,
            draft_tokens, draft_probs, kv_loc_plan,
        )


class BoundPlannerDraftWorker(PartialPlanDraftWorker):
    # expect: clean
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
        )
        if can_run_decode_cuda_graph:
            result = self.cuda_graph_runner.execute(forward_batch)
        else:
            self._sync_dp(forward_batch)
            if not forward_batch.forward_mode.is_idle():
                self._plan_draft(forward_batch)
            result = self.draft_forward(forward_batch)
        parent_list, top_scores_index, draft_tokens, draft_probs = result
        return _verify_input_from(
            self, batch, draft_input, parent_list, top_scores_index,
            draft_tokens, draft_probs, kv_loc_plan,
        )


class DPGraphDraftWorker(EagleDraftWorker):
    """DP ranks always replay the padded draft graph; only single-rank
    deployments take the eager multi-step path."""

    # expect: clean
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
        )
        if can_run_decode_cuda_graph or dp_sync_active(forward_batch):
            if not can_run_decode_cuda_graph:
                raise RuntimeError(
                    "DP-attention draft decode requires a captured draft graph "
                    f"(bs={forward_batch.batch_size})"
                )
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.cuda_graph_runner.execute(forward_batch)
            )
            return _verify_input_from(
                self, batch, draft_input, parent_list, top_scores_index,
                draft_tokens, draft_probs, kv_loc_plan,
            )

        if not forward_batch.forward_mode.is_idle() and self.speculative_num_steps > 1:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        parent_list, top_scores_index, draft_tokens, draft_probs = self.draft_forward(
            forward_batch
        )
        return _verify_input_from(
            self, batch, draft_input, parent_list, top_scores_index,
            draft_tokens, draft_probs, kv_loc_plan,
        )
