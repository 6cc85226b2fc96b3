"""Forked EAGLE v2 draft worker.

Adds eager fallbacks for the draft-decode loop that our deployments hit when a
batch does not fit a captured draft graph (large DP-attention batches, odd
topk/page-size combos).  Every entry point builds the draft batch with the
upstream ``prepare_for_draft`` and then runs the multi-step loop itself or via
the inherited ``draft_forward``.
"""

from __future__ import annotations

import functools
import logging
from typing import List, Optional

import torch

from sglang.srt.layers.dp_attention import is_dp_attention_enabled
from sglang.srt.runtime_context import get_exec
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.speculative.eagle_info import EagleDraftInput
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.common import fast_topk

from blindsg14.spec.plan_utils import (
    PlannedStep,
    iter_planned_steps,
    iter_unplanned_steps,
    mark_kwargs,
    planned,
    preplan_and_seal,
    replan_after_pad,
    resolve_forward_kwargs,
    seal,
    unseal,
)

logger = logging.getLogger(__name__)


class ForkEagleDraftWorker(EagleDraftWorker):
    """EAGLE draft worker with eager fallbacks for non-graph batches."""

    # ------------------------------------------------------------------ helpers
    def _draft_batch(self, batch: ScheduleBatch):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_graph, _ = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        return forward_batch, can_run_graph

    def _chain_loop(self, forward_batch: ForwardBatch):
        """topk==1 chain loop; plans nothing, forwards num_steps - 1 times."""
        spec_info = forward_batch.spec_info
        topk_p, topk_index = spec_info.topk_p, spec_info.topk_index
        hidden_states = spec_info.hidden_states
        tokens: List[torch.Tensor] = [topk_index]
        for i in range(self.speculative_num_steps - 1):
            forward_batch.input_ids = topk_index.flatten()
            spec_info.hidden_states = hidden_states
            # The runner's own attention backend serves every chain step.
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            topk_p, topk_index = fast_topk(
                torch.softmax(logits_output.next_token_logits, dim=-1), 1, dim=-1
            )
            hidden_states = logits_output.hidden_states
            forward_batch.positions.add_(1)
            tokens.append(topk_index)
        return torch.cat(tokens, dim=1)

    # ------------------------------------------------------------- entry points
    # expect: SG106
    def draft_eager_fallback(self, batch: ScheduleBatch):
        forward_batch, can_run_graph = self._draft_batch(batch)
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)
        if forward_batch.forward_mode.is_idle():
            return self.draft_forward(forward_batch)
        # One plan covers every step of the multi-step backend.
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_forward(forward_batch)

    # expect: SG106
    def draft_legacy_skip_init(self, batch: ScheduleBatch):
        forward_batch, _ = self._draft_batch(batch)
        spec_info = forward_batch.spec_info
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        score_list, token_list, parents_list = [], [], []
        topk_p, topk_index = spec_info.topk_p, spec_info.topk_index
        hidden_states, scores = spec_info.hidden_states, None
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
            # Pre-0.5.20 call shape kept for the out-of-tree MTP heads.
            out = self.draft_runner.forward(forward_batch, skip_attn_backend_init=True)
            probs = torch.softmax(out.logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            hidden_states = out.logits_output.hidden_states
        return organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )

    # expect: SG106
    def draft_in_planned_scope(self, batch: ScheduleBatch):
        forward_batch, can_run_graph = self._draft_batch(batch)
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)
        with planned(self.draft_attn_backend, forward_batch) as fb:
            return self.draft_forward(fb)

    # expect: clean
    def draft_in_planned_scope_replan_safe(self, batch: ScheduleBatch):
        forward_batch, can_run_graph = self._draft_batch(batch)
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)
        # Single-backend chain (topk == 1): the runner's own backend is the
        # one the forward would re-plan, so the re-plan is equivalent.
        with planned(
            self.draft_runner.attn_backend, forward_batch, replan_equivalent=True
        ) as fb:
            return self._chain_loop(fb)

    # expect: SG106
    def draft_partial_steps(self, batch: ScheduleBatch):
        forward_batch, _ = self._draft_batch(batch)
        run_step = functools.partial(self.draft_runner.forward, forward_batch)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        outputs = []
        for _ in range(self.speculative_num_steps - 1):
            outputs.append(run_step().logits_output)
            forward_batch.positions.add_(1)
        return outputs

    # expect: SG106
    def draft_from_planned_generator(self, batch: ScheduleBatch):
        forward_batch, _ = self._draft_batch(batch)
        logits = []
        for fb in iter_planned_steps(
            self.draft_runner.attn_backend,
            forward_batch,
            self.speculative_num_steps - 1,
        ):
            logits.append(self.draft_runner.forward(fb).logits_output)
        return logits

    # expect: clean
    def draft_from_unplanned_generator(self, batch: ScheduleBatch):
        forward_batch, _ = self._draft_batch(batch)
        logits = []
        for fb in iter_unplanned_steps(forward_batch, self.speculative_num_steps - 1):
            logits.append(self.draft_runner.forward(fb).logits_output)
        return logits

    # expect: SG106
    def draft_planned_step_record(self, batch: ScheduleBatch):
        forward_batch, _ = self._draft_batch(batch)
        step = PlannedStep(forward_batch, self.draft_runner.attn_backend)
        return self._chain_loop(step.forward_batch)

    # expect: clean
    def draft_planned_step_record_replan_safe(self, batch: ScheduleBatch):
        forward_batch, _ = self._draft_batch(batch)
        step = PlannedStep(
            forward_batch, self.draft_runner.attn_backend, replan_equivalent=True
        )
        return self._chain_loop(step.forward_batch)

    # expect: SG106
    def draft_explicit_pad_then_eager(self, batch: ScheduleBatch):
        forward_batch, _ = self._draft_batch(batch)
        runner = self.draft_runner
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(runner)
        ret = runner.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # expect: clean
    def draft_pad_then_plan_eager(self, batch: ScheduleBatch):
        forward_batch, _ = self._draft_batch(batch)
        runner = self.draft_runner
        forward_batch = replan_after_pad(runner, runner.attn_backend, forward_batch)
        ret = runner.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # expect: SG106
    def draft_deprecated_flag_mapping(self, batch: ScheduleBatch):
        forward_batch, _ = self._draft_batch(batch)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        # Same effect as the old skip_attn_backend_init=True kwarg.
        forward_batch.apply_deprecated_skip_attn_backend_init(True)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_deprecated_flag_off(self, batch: ScheduleBatch):
        forward_batch, _ = self._draft_batch(batch)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.apply_deprecated_skip_attn_backend_init(False)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_sealed_then_unsealed(self, batch: ScheduleBatch):
        forward_batch, can_run_graph = self._draft_batch(batch)
        preplan_and_seal(self.draft_runner.attn_backend, forward_batch)
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)
        # Eager: the pre-plan describes the unpadded batch; let the forward
        # plan the DP-padded one instead.
        unseal(forward_batch)
        return self._chain_loop(forward_batch)

    # expect: clean
    def draft_mark_only_without_dp(self, batch: ScheduleBatch):
        forward_batch, _ = self._draft_batch(batch)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        if not is_dp_attention_enabled():
            # No MLP-sync padding without DP attention: the plan stays exact.
            seal(forward_batch)
        return self._chain_loop(forward_batch)

    # expect: SG106
    def draft_forward_kwargs_legacy(self, batch: ScheduleBatch):
        forward_batch, _ = self._draft_batch(batch)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        kwargs = resolve_forward_kwargs(forward_batch, legacy_skip=True)
        return self.draft_runner.forward(**kwargs).logits_output

    # expect: clean
    def draft_forward_kwargs_default(self, batch: ScheduleBatch):
        forward_batch, _ = self._draft_batch(batch)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        kwargs = resolve_forward_kwargs(forward_batch)
        return self.draft_runner.forward(**kwargs).logits_output

    # expect: clean
    def draft_mark_from_kwargs_safe(self, batch: ScheduleBatch):
        forward_batch, _ = self._draft_batch(batch)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(**mark_kwargs(True))
        return self._chain_loop(forward_batch)

    # expect: SG106
    def draft_mark_from_kwargs_unsafe(self, batch: ScheduleBatch):
        forward_batch, _ = self._draft_batch(batch)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(**mark_kwargs(False))
        return self._chain_loop(forward_batch)

    # expect: SG106
    def draft_with_restore(self, batch: ScheduleBatch):
        forward_batch, _ = self._draft_batch(batch)
        saved_positions = forward_batch.positions.clone()
        try:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            out = self.draft_runner.forward(forward_batch)
        finally:
            forward_batch.positions = saved_positions
        return out.logits_output

    # expect: SG106
    def draft_with_local_planner(self, batch: ScheduleBatch):
        forward_batch, _ = self._draft_batch(batch)
        backend = self.draft_runner.attn_backend

        def _plan_once():
            if forward_batch.forward_mode.is_idle():
                return
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        _plan_once()
        return self._chain_loop(forward_batch)


class PendingDraftEagleWorker(EagleDraftWorker):
    """Draft worker that builds the next draft batch ahead of time.

    ``stage_draft`` runs on the scheduler thread right after verify; the
    forward runs later in ``run_staged_draft``.
    """

    _staged_batch: Optional[ForwardBatch] = None

    def stage_draft(self, batch: ScheduleBatch) -> None:
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
        self._staged_batch = forward_batch

    @property
    def staged_planned_batch(self) -> ForwardBatch:
        forward_batch = self._staged_batch
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return forward_batch

    @property
    def staged_batch(self) -> ForwardBatch:
        return self._staged_batch

    # expect: SG106
    def run_staged_draft(self):
        forward_batch = self.staged_planned_batch
        self._staged_batch = None
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def run_staged_draft_unplanned(self):
        forward_batch = self.staged_batch
        self._staged_batch = None
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def run_staged_draft_graphless(self):
        forward_batch = self._staged_batch
        if get_exec().graph.disable_cuda_graph:
            # No graphs captured: plan here so the forward can skip it.
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def run_staged_draft_single_dp(self):
        forward_batch = self._staged_batch
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        if not self.server_args.enable_dp_attention:
            # Without DP attention nothing pads the batch after this point.
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output
