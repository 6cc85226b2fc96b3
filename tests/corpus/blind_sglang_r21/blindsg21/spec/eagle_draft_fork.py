"""EAGLE v2 draft workers used by the fork.

``PlannedEagleDraftWorker`` keeps per-round accounting for the adaptive-steps
controller; ``DpRefusingEagleDraftWorker`` is the DP-attention deployment
variant; ``UnmarkingDraftExtendWorker`` reuses upstream's
``prepare_for_draft_extend`` but hands planning back to the runner when the
batch will be DP-padded.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
    prepare_for_draft_extend,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import fast_topk, require_mlp_sync


class _DraftTailMixin:
    """Shared tail of the draft / draft-extend overrides below."""

    def _verify_input_from(
        self, batch, draft_input, parent_list, top_scores_index, draft_tokens,
        draft_probs, kv_loc_plan, with_topology,
    ):
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

    def _draft_extend_input(self, batch_result: GenerationBatchResult):
        accept_lens = batch_result.accept_lens
        n = self.speculative_num_draft_tokens
        select_index = (
            torch.arange(accept_lens.shape[0], device=accept_lens.device) * n
            + accept_lens
            - 1
        )
        extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=accept_lens - 1,
            num_accept_tokens=accept_lens,
            num_tokens_per_req=n,
            num_tokens_for_logprob_per_req=n,
        )
        return extend_input, select_index, batch_result.next_token_ids.to(torch.int64)

    def _publish_next_draft_input(self, batch_result, logits_output) -> None:
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        nxt: EagleDraftInput = batch_result.next_draft_input
        nxt.topk_p, nxt.topk_index = topk_p, topk_index
        nxt.hidden_states = logits_output.hidden_states


class PlannedEagleDraftWorker(_DraftTailMixin, EagleDraftWorker):
    """Counts eager (non-graph) draft rounds for the adaptive-steps controller."""

    eager_rounds: int = 0

    # expect: SG106
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
            if draft_probs is not None:
                draft_probs = draft_probs.clone()
        else:
            self.eager_rounds += 1
            if (
                self.speculative_num_steps > 1
                and not forward_batch.forward_mode.is_idle()
            ):
                # One multi-step plan covers every inner draft step.
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )
        return self._verify_input_from(
            batch, draft_input, parent_list, top_scores_index, draft_tokens,
            draft_probs, kv_loc_plan, with_topology,
        )

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        extend_input, select_index, next_token_ids = self._draft_extend_input(
            batch_result
        )
        graph_runner = self.cuda_graph_runner_for_draft_extend
        if self.plan_stream:
            self.plan_stream.wait_stream(
                torch.get_device_module(self.device).current_stream()
            )
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                extend_input,
                batch,
                next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner,
                graph_runner,
                return_hidden_states_before_norm=False,
                kv_loc_plan=kv_loc_plan,
            )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
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
        self._publish_next_draft_input(batch_result, logits_output)


class UnmarkingDraftExtendWorker(_DraftTailMixin, EagleDraftWorker):
    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        extend_input, select_index, next_token_ids = self._draft_extend_input(
            batch_result
        )
        graph_runner = self.cuda_graph_runner_for_draft_extend
        forward_batch = prepare_for_draft_extend(
            extend_input,
            batch,
            next_token_ids,
            self.speculative_num_draft_tokens,
            self.draft_runner,
            graph_runner,
            return_hidden_states_before_norm=False,
            kv_loc_plan=kv_loc_plan,
        )
        if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
            logits_output = graph_runner.execute(forward_batch, select_index)
        else:
            if forward_batch.global_num_tokens_cpu is not None:
                # prepare_for_draft_extend planned the pre-pad batch; the runner
                # pads it for DP attention below, so let it plan again.
                forward_batch.forward_metadata_ready = False
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            logits_output.next_token_logits = logits_output.next_token_logits[
                select_index
            ]
            if logits_output.hidden_states is not None:
                logits_output.hidden_states = logits_output.hidden_states[
                    select_index
                ]
        self._publish_next_draft_input(batch_result, logits_output)


class DpRefusingEagleDraftWorker(_DraftTailMixin, EagleDraftWorker):
    """Multi-step draft plans cannot be redone by the runner after DP padding
    (the runner only knows the draft-extend backend), so under DP attention
    this worker insists on the draft CUDA graph."""

    # expect: clean
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
        elif forward_batch.forward_mode.is_idle():
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )
        else:
            if require_mlp_sync():
                raise RuntimeError(
                    "eager multi-step draft under DP attention is unsupported; "
                    "raise --cuda-graph-max-bs so the draft graph covers the batch"
                )
            if self.speculative_num_steps > 1:
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )
        return self._verify_input_from(
            batch, draft_input, parent_list, top_scores_index, draft_tokens,
            draft_probs, kv_loc_plan, with_topology,
        )
