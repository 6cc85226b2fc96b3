"""EAGLE top-k > 1 draft trees on the spec-v2 (overlap) worker.

The lab runs tree drafts with ``--speculative-eagle-topk 4`` and a
FlashInfer/Triton multi-step draft backend; these subclasses keep the
upstream ``EagleDraftWorker`` plumbing and only swap the draft entry points.
"""

from __future__ import annotations

import logging
from typing import Tuple

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle_utils import per_step_draft_out_cache_loc
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import require_mlp_sync

from blindsg33.spec.steps import run_tree_steps

logger = logging.getLogger(__name__)


class TreeDraftWorker(EagleDraftWorker):
    """Draft worker for wide trees (topk > 1) with an eager fallback."""

    @property
    def _forward_may_replan(self) -> bool:
        # Multi-step wrapper plans are clobbered by a forward-path plan, so
        # only hand the forward a re-plan when attention is replicated.
        return not get_parallel().attn_dp_enabled

    def _prepare(self, batch: ScheduleBatch):
        return prepare_for_draft(
            batch.spec_info,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
            target_translator=self.target_worker.model_runner.kv_index_translator,
            num_draft_tokens=self.speculative_num_draft_tokens,
        )

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft — tree override: graph replay when it fits, else plans draft_attn_backend, marks the batch, runs the eager step loop and builds the verify input
    # expect: SG106
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input = batch.spec_info
        forward_batch, can_run_graph, kv_loc_plan = self._prepare(batch)

        if can_run_graph:
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
            parent_list, top_scores_index, draft_tokens = run_tree_steps(
                self, forward_batch
            )
            draft_probs = None

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

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft (pre-plan half) — helper that plans the multi-step backend and marks the batch, returning whether it did
    # expect: SG106
    def _preplan_tree(self, forward_batch: ForwardBatch) -> bool:
        if forward_batch.forward_mode.is_idle() or self.speculative_num_steps <= 1:
            return False
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return True

    def draft_tree_only(self, batch: ScheduleBatch) -> Tuple[torch.Tensor, ...]:
        forward_batch, can_run_graph, _ = self._prepare(batch)
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)[:3]
        self._preplan_tree(forward_batch)
        return run_tree_steps(self, forward_batch)

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft — eager branch whose mark takes replan_equivalent from the _forward_may_replan property
    # expect: SG106
    def draft_with_policy(self, batch: ScheduleBatch) -> Tuple[torch.Tensor, ...]:
        forward_batch, can_run_graph, _ = self._prepare(batch)
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)[:3]
        if not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=self._forward_may_replan
            )
        return run_tree_steps(self, forward_batch)

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft — graph replay when it fits; an eager draft of a batch carrying DP token counts (global_num_tokens_cpu) raises; otherwise plans draft_attn_backend, marks, runs the step loop
    # expect: clean
    def draft_eager_split(self, batch: ScheduleBatch) -> Tuple[torch.Tensor, ...]:
        forward_batch, can_run_graph, _ = self._prepare(batch)
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)[:3]
        if forward_batch.global_num_tokens_cpu is not None:
            raise NotImplementedError(
                f"eager tree draft at bs={forward_batch.batch_size} exceeds the "
                "captured draft graphs; raise --cuda-graph-max-bs"
            )
        if not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return run_tree_steps(self, forward_batch)

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft (1-step draft) — worker asserted to speculative_num_steps == 1; plans draft_attn_backend and marks, then the step loop only samples from the seed top-k
    # expect: clean
    def draft_single_step(self, batch: ScheduleBatch) -> Tuple[torch.Tensor, ...]:
        assert self.speculative_num_steps == 1, "single-step tree draft"
        forward_batch, can_run_graph, _ = self._prepare(batch)
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)[:3]
        if not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return run_tree_steps(self, forward_batch)


class TreeDraftRunner(ModelRunner):
    """Draft ModelRunner that owns the multi-step plan of eager tree drafts."""

    draft_attn_backend = None

    # idiom: model_executor/model_runner.py ModelRunner._prepare_eager_forward_batch — override: super() (MLP-sync padding) first, then an unplanned DECODE draft batch is planned on draft_attn_backend (all steps) and marked
    # expect: clean
    def _prepare_eager_forward_batch(self, forward_batch: ForwardBatch) -> None:
        super()._prepare_eager_forward_batch(forward_batch)
        if (
            self.draft_attn_backend is not None
            and forward_batch.forward_mode.is_decode()
            and forward_batch.spec_info is not None
            and forward_batch.needs_forward_metadata_init()
        ):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()


class ChainDraftWorker(TreeDraftWorker):
    """topk == 1 chain drafts on the draft runner's own backend."""

    @property
    def _replan_after_pad(self) -> bool:
        return require_mlp_sync()

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft_forward (topk == 1) — per step: plan draft_runner.attn_backend, mark with replan_equivalent from the _replan_after_pad property (require_mlp_sync()), draft_runner.forward without a per-step ForwardContext
    # expect: clean
    def draft_chain(self, batch: ScheduleBatch) -> torch.Tensor:
        forward_batch, can_run_graph, _ = self._prepare(batch)
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)[2]
        spec_info = forward_batch.spec_info
        backend = self.draft_runner.attn_backend
        out_cache_loc = per_step_draft_out_cache_loc(
            forward_batch.out_cache_loc,
            forward_batch.batch_size,
            1,
            self.speculative_num_steps,
        )
        token = spec_info.topk_index[:, :1].flatten()
        tokens = [token]
        for i in range(self.speculative_num_steps - 1):
            forward_batch.input_ids = token
            forward_batch.out_cache_loc = out_cache_loc[i]
            if not forward_batch.forward_mode.is_idle():
                backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(
                    replan_equivalent=self._replan_after_pad
                )
            out = self.draft_runner.forward(forward_batch).logits_output
            token = torch.argmax(out.next_token_logits, dim=-1)
            spec_info.hidden_states = out.hidden_states
            forward_batch.positions.add_(1)
            forward_batch.seq_lens.add_(1)
            tokens.append(token)
        return torch.stack(tokens, dim=1)
