"""Draft-decode hooks of the fork's EAGLE v2 draft workers.

Each class overrides one hook of upstream ``EagleDraftWorker`` (eagle_worker_v2)
and reuses the shared upstream helpers (``prepare_for_draft``,
``build_eagle_verify_input``) around it.
"""

from __future__ import annotations

import contextlib
import logging
from typing import List, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_info import EagleDraftInput, EagleVerifyInput
from sglang.srt.speculative.eagle_utils import (
    organize_draft_results,
    per_step_draft_out_cache_loc,
)
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.common import fast_topk, require_mlp_sync

from blindsg42.common.plan_state import StagedBatch

logger = logging.getLogger(__name__)


def _to_verify_input(
    worker: EagleDraftWorker,
    batch: ScheduleBatch,
    draft_input: EagleDraftInput,
    parent_list,
    top_scores_index,
    draft_tokens,
    draft_probs,
    kv_loc_plan,
) -> EagleVerifyInput:
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


class MtpPrePlanDraftWorker(EagleDraftWorker):
    """MTP draft worker that plans the multi-step draft metadata itself.

    Keeps upstream's draft_forward; only the hand-off between the draft batch
    and the per-step forwards is owned here (DSA seed handling dropped, the
    fork does not ship DSA drafts).
    """

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
            if draft_probs is not None:
                draft_probs = draft_probs.clone()
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                # One plan for all inner steps: every step reads the same
                # per-step kv_indptr rows the multi-step backend fills here.
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )

        verify_input = _to_verify_input(
            self,
            batch,
            draft_input,
            parent_list,
            top_scores_index,
            draft_tokens,
            draft_probs,
            kv_loc_plan,
        )
        if with_topology:
            return verify_input, parent_list, top_scores_index
        return verify_input


class StagedDraftWorker(EagleDraftWorker):
    """Splits draft() into a plan-stream stage and a compute-stream run.

    ``stage_draft_batch`` runs under ``plan_stream_ctx`` while the previous
    round's draft extend is still on the compute stream; ``run_staged_draft``
    consumes what it staged.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._staged: Optional[StagedBatch] = None
        self._staged_plan = None
        self._staged_draft_input: Optional[EagleDraftInput] = None

    def stage_draft_batch(self, batch: ScheduleBatch) -> None:
        draft_input: EagleDraftInput = batch.spec_info
        with self.plan_stream_ctx:
            forward_batch, can_run_graph, kv_loc_plan = prepare_for_draft(
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
            staged = StagedBatch(
                forward_batch=forward_batch, can_run_cuda_graph=can_run_graph
            )
            if (
                not can_run_graph
                and not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                staged.planned = True
                staged.notes.append("multi-step plan on plan stream")
        self._staged = staged
        self._staged_plan = kv_loc_plan
        self._staged_draft_input = draft_input

    # expect: SG106
    def run_staged_draft(self, batch: ScheduleBatch) -> EagleVerifyInput:
        staged = self._staged
        if staged is None:
            self.stage_draft_batch(batch)
            staged = self._staged
        self._staged = None
        if self.plan_stream is not None:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        forward_batch = staged.forward_batch
        if staged.can_run_cuda_graph:
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.cuda_graph_runner.execute(forward_batch)
            )
        else:
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )
        return _to_verify_input(
            self,
            batch,
            self._staged_draft_input,
            parent_list,
            top_scores_index,
            draft_tokens,
            draft_probs,
            self._staged_plan,
        )

    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        self.stage_draft_batch(batch)
        return self.run_staged_draft(batch)


class SingleShotPlanDraftWorker(EagleDraftWorker):
    """Draft worker whose draft_forward owns the planning of its steps.

    ``draft`` only builds the batch; ``draft_forward`` plans once before the
    step loop so the graph-capture body (which calls draft_forward with a
    graph-planned batch) and the eager path share one entry point.
    """

    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_graph, kv_loc_plan = prepare_for_draft(
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
        if can_run_graph:
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.cuda_graph_runner.execute(forward_batch)
            )
        else:
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )
        verify_input = _to_verify_input(
            self,
            batch,
            draft_input,
            parent_list,
            top_scores_index,
            draft_tokens,
            draft_probs,
            kv_loc_plan,
        )
        if with_topology:
            return verify_input, parent_list, top_scores_index
        return verify_input

    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info: EagleDraftInput = forward_batch.spec_info
        if forward_batch.forward_mode.is_idle():
            return self._draft_forward_idle(forward_batch, spec_info)

        if (
            self.speculative_num_steps > 1
            and forward_batch.needs_forward_metadata_init()
        ):
            # Eager entry: the graph runner arrives already planned.
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        out_cache_loc = per_step_draft_out_cache_loc(
            forward_batch.out_cache_loc,
            forward_batch.batch_size,
            self.topk,
            self.speculative_num_steps,
        )
        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
        )
        if self.hot_token_id is not None:
            topk_index = self.hot_token_id[topk_index]

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
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            forward_batch.positions.add_(1)
            if self.hot_token_id is not None:
                topk_index = self.hot_token_id[topk_index]
            hidden_states = logits_output.hidden_states

        parent_list, top_scores_index, draft_tokens = organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )
        return parent_list, top_scores_index, draft_tokens, None


class MtpEagerDraftWorker(EagleDraftWorker):
    """Draft worker for deployments without attention DP.

    The eager multi-step pre-plan is only valid when ModelRunner will not
    re-shape the draft batch; under MLP sync the batch must take the graph.
    """

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
        elif forward_batch.forward_mode.is_idle():
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self._draft_forward_idle(forward_batch, draft_input)
            )
        else:
            if require_mlp_sync() or forward_batch.global_num_tokens_cpu is not None:
                raise RuntimeError(
                    "eager multi-step draft with MLP sync is not supported by this "
                    "worker; raise --cuda-graph-max-bs so the draft graph covers "
                    f"bs={forward_batch.batch_size}"
                )
            if self.speculative_num_steps > 1:
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )

        verify_input = _to_verify_input(
            self,
            batch,
            draft_input,
            parent_list,
            top_scores_index,
            draft_tokens,
            draft_probs,
            kv_loc_plan,
        )
        if with_topology:
            return verify_input, parent_list, top_scores_index
        return verify_input


class LaunchConfiguredDraftWorker(EagleDraftWorker):
    """Draft worker that resolves its planning regime once at construction."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # MLP sync (attention DP / gathered buffers) is a launch-time property.
        self._mlp_sync_required = require_mlp_sync()
        self._eager_preplan_allowed = not self._mlp_sync_required

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

        canary = contextlib.nullcontext()
        with canary:
            if can_run_decode_cuda_graph:
                parent_list, top_scores_index, draft_tokens, draft_probs = (
                    self.cuda_graph_runner.execute(forward_batch)
                )
            elif forward_batch.forward_mode.is_idle():
                parent_list, top_scores_index, draft_tokens, draft_probs = (
                    self._draft_forward_idle(forward_batch, draft_input)
                )
            elif not self._eager_preplan_allowed:
                raise NotImplementedError(
                    "eager draft decode needs the draft cuda graph when MLP sync "
                    "is enabled"
                )
            else:
                if self.speculative_num_steps > 1:
                    self.draft_attn_backend.init_forward_metadata(forward_batch)
                    forward_batch.mark_forward_metadata_ready()
                parent_list, top_scores_index, draft_tokens, draft_probs = (
                    self.draft_forward(forward_batch)
                )

        verify_input = _to_verify_input(
            self,
            batch,
            draft_input,
            parent_list,
            top_scores_index,
            draft_tokens,
            draft_probs,
            kv_loc_plan,
        )
        if with_topology:
            return verify_input, parent_list, top_scores_index
        return verify_input
