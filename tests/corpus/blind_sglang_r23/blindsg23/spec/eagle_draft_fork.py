"""Draft-decode variants of the fork's EAGLE v2 draft worker.

Hierarchy: EagleDraftWorkerBase -> EagleDraftWorker (upstream) -> _ForkDraftBase
-> the workers below. The draft batch comes from upstream ``prepare_for_draft``;
what differs is where and how its attention metadata is planned.
"""

from __future__ import annotations

import contextlib
from typing import List

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_info import EagleDraftInput
from sglang.srt.speculative.eagle_utils import per_step_draft_out_cache_loc
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import fast_topk, is_npu

from blindsg23.common.plan_helpers import plan_and_mark


class _ForkDraftBase(EagleDraftWorker):
    """Shared plumbing: batch construction and the verify-input tail."""

    def _draft_batch(self, batch: ScheduleBatch, *, use_graph_runner: bool = True):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_graph, kv_loc_plan = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner if use_graph_runner else None,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
            target_translator=self.target_worker.model_runner.kv_index_translator,
            num_draft_tokens=self.speculative_num_draft_tokens,
        )
        return draft_input, forward_batch, bool(can_run_graph), kv_loc_plan

    def _first_step_inputs(self, forward_batch: ForwardBatch, draft_input: EagleDraftInput):
        """Inputs of draft step 0: the seed top-k ids and the step's KV slots."""
        forward_batch.input_ids = draft_input.topk_index.flatten()
        if forward_batch.out_cache_loc is not None:
            forward_batch.out_cache_loc = per_step_draft_out_cache_loc(
                forward_batch.out_cache_loc,
                forward_batch.batch_size,
                self.topk,
                self.speculative_num_steps,
            )[0]

    def _verify_tail(self, batch, draft_input, parent_list, top_scores_index, draft_tokens, kv_loc_plan):
        verify_input = build_eagle_verify_input(
            batch,
            draft_input,
            parent_list,
            top_scores_index,
            draft_tokens,
            None,
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
        return verify_input

    def _one_step_tail(self, batch, draft_input, logits_output, kv_loc_plan):
        """topk == 1, one draft forward: the chain is [topk_index, argmax]."""
        bs = draft_input.topk_index.shape[0]
        _, next_index = fast_topk(logits_output.next_token_logits, 1, dim=-1)
        draft_tokens = torch.cat([draft_input.topk_index, next_index], dim=1)
        return self._verify_tail(
            batch,
            draft_input,
            self._topk1_parents_prealloc[:bs],
            self._topk1_score_indices_prealloc[:bs],
            draft_tokens,
            kv_loc_plan,
        )


class ChainDraftWorker(_ForkDraftBase):
    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft (non-graph branch)
    # expect: SG106
    def draft(self, batch: ScheduleBatch):
        draft_input, forward_batch, can_run_graph, kv_loc_plan = self._draft_batch(batch)
        if can_run_graph:
            parent_list, top_scores_index, draft_tokens, _ = (
                self.cuda_graph_runner.execute(forward_batch)
            )
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                # One plan for all draft steps; the step forwards reuse it.
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            parent_list, top_scores_index, draft_tokens, _ = self.draft_forward(
                forward_batch
            )
        return self._verify_tail(
            batch, draft_input, parent_list, top_scores_index, draft_tokens, kv_loc_plan
        )


class LoopedDraftWorker(_ForkDraftBase):
    def _step_loop(self, forward_batch: ForwardBatch) -> List[torch.Tensor]:
        """Run the (num_steps - 1) draft forwards; collect each step's top-k ids."""
        spec_info: EagleDraftInput = forward_batch.spec_info
        topk_index = spec_info.topk_index
        collected = [topk_index]
        out_cache_loc = per_step_draft_out_cache_loc(
            forward_batch.out_cache_loc,
            forward_batch.batch_size,
            self.topk,
            self.speculative_num_steps,
        )
        for i in range(self.speculative_num_steps - 1):
            forward_batch.input_ids = topk_index.flatten()
            forward_batch.out_cache_loc = out_cache_loc[i].contiguous()
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            _, topk_index = fast_topk(logits_output.next_token_logits, 1, dim=-1)
            spec_info.hidden_states = logits_output.hidden_states
            forward_batch.positions.add_(1)
            collected.append(topk_index)
        return collected

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft + draft_forward (per-step forward_context)
    # expect: SG106
    def draft(self, batch: ScheduleBatch):
        draft_input, forward_batch, _, kv_loc_plan = self._draft_batch(
            batch, use_graph_runner=False
        )
        plan_and_mark(self.draft_attn_backend, forward_batch)
        if forward_batch.forward_mode.is_idle():
            return self._verify_tail(batch, draft_input, None, None, None, kv_loc_plan)
        steps = self._step_loop(forward_batch)
        bs = steps[0].shape[0]
        return self._verify_tail(
            batch,
            draft_input,
            self._topk1_parents_prealloc[:bs],
            self._topk1_score_indices_prealloc[:bs],
            torch.cat(steps, dim=1),
            kv_loc_plan,
        )


class NpuAwareDraftWorker(_ForkDraftBase):
    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (mark unless NPU eager) applied to EagleDraftWorker.draft
    # expect: SG106
    def draft(self, batch: ScheduleBatch):
        draft_input, forward_batch, can_run_graph, kv_loc_plan = self._draft_batch(batch)
        if can_run_graph:
            parent_list, top_scores_index, draft_tokens, _ = (
                self.cuda_graph_runner.execute(forward_batch)
            )
        else:
            if not forward_batch.forward_mode.is_idle():
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                # NPU eager: block_table shape changes under DP padding, so
                # leave the batch unmarked and let forward_decode re-init.
                if not is_npu() or can_run_graph:
                    forward_batch.mark_forward_metadata_ready()
            parent_list, top_scores_index, draft_tokens, _ = self.draft_forward(
                forward_batch
            )
        return self._verify_tail(
            batch, draft_input, parent_list, top_scores_index, draft_tokens, kv_loc_plan
        )


class FanoutDraftWorker(_ForkDraftBase):
    """Plans each per-step backend separately (the fork mixes backends per step)."""

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLAMultiStepDraftBackend.init_forward_metadata (loop over step backends) in EagleDraftWorker.draft
    # expect: SG106
    def draft(self, batch: ScheduleBatch):
        draft_input, forward_batch, can_run_graph, kv_loc_plan = self._draft_batch(batch)
        if can_run_graph:
            parent_list, top_scores_index, draft_tokens, _ = (
                self.cuda_graph_runner.execute(forward_batch)
            )
            return self._verify_tail(
                batch, draft_input, parent_list, top_scores_index, draft_tokens, kv_loc_plan
            )
        if not forward_batch.forward_mode.is_idle():
            for step_backend in self.draft_attn_backend.attn_backends:
                step_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        parent_list, top_scores_index, draft_tokens, _ = self.draft_forward(
            forward_batch
        )
        return self._verify_tail(
            batch, draft_input, parent_list, top_scores_index, draft_tokens, kv_loc_plan
        )


class OneStepDraftWorker(_ForkDraftBase):
    """MTP-style one-step draft (speculative_num_steps == 2, topk == 1): a
    single draft forward, planned on the draft runner's own backend."""

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft + forward_batch_info.py mark_forward_metadata_ready(replan_equivalent=True)
    # expect: clean
    def draft(self, batch: ScheduleBatch):
        draft_input, forward_batch, _, kv_loc_plan = self._draft_batch(
            batch, use_graph_runner=False
        )
        self._first_step_inputs(forward_batch, draft_input)
        step_backend = self.draft_runner.attn_backend
        if not forward_batch.forward_mode.is_idle():
            # Planned early so the index build overlaps the verify tail. The
            # forward plans through the same backend object, so it may re-plan
            # if DP padding reshapes the batch.
            step_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._one_step_tail(batch, draft_input, logits_output, kv_loc_plan)


class PadFirstOneStepDraftWorker(_ForkDraftBase):
    # idiom: model_executor/model_runner.py ModelRunner._forward_raw eager branch (pad, then plan, then EagerRunner.execute)
    # expect: clean
    def draft(self, batch: ScheduleBatch):
        draft_input, forward_batch, _, kv_loc_plan = self._draft_batch(
            batch, use_graph_runner=False
        )
        runner = self.draft_runner
        self._first_step_inputs(forward_batch, draft_input)
        # Same order as ModelRunner._forward_raw: DP / MLP-sync padding first,
        # then the plan on the padded batch, then the eager execute.
        runner._prepare_eager_forward_batch(forward_batch)
        if not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        with forward_context(
            ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[0]),
            forward_batch=forward_batch,
        ):
            logits_output = runner.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(logits_output)
        return self._one_step_tail(batch, draft_input, logits_output, kv_loc_plan)


class GraphOnlyMarkDraftWorker(_ForkDraftBase):
    """One-step draft whose draft runner owns a captured decode graph."""

    # idiom: speculative/eagle_utils.py eagle_prepare_for_verify (load_batch + mark only on the cuda-graph path)
    # expect: clean
    def draft(self, batch: ScheduleBatch):
        draft_input, forward_batch, _, kv_loc_plan = self._draft_batch(
            batch, use_graph_runner=False
        )
        self._first_step_inputs(forward_batch, draft_input)
        graph_runner = self.draft_runner.decode_cuda_graph_runner
        can_run_graph = bool(
            graph_runner is not None and graph_runner.can_run_graph(forward_batch)
        )
        plan_ctx = self.plan_stream_ctx if can_run_graph else contextlib.nullcontext()
        with plan_ctx:
            if can_run_graph:
                # The graph runner pads to its captured size and plans that.
                graph_runner.load_batch(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        # Eager: unmarked, so the forward plans after its own DP padding.
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._one_step_tail(batch, draft_input, logits_output, kv_loc_plan)
