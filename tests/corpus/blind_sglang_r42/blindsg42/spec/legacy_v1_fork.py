"""0.5.6-era draft paths carried by the fork on top of the v2 worker.

The fork shipped its MTP integration against SGLang 0.5.6 (``eagle_worker.py``),
where the draft worker planned attention itself and then called
``ModelRunner.forward(forward_batch, skip_attn_backend_init=True)``. 0.5.23 still
accepts that keyword (deprecated; ``ForwardBatch.apply_deprecated_skip_attn_
backend_init`` maps it onto the plan record), so these paths were kept when the
fork rebased onto the v2 worker.
"""

from __future__ import annotations

import logging
from typing import List, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
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
from sglang.srt.utils.common import fast_topk

from blindsg42.spec.preplan import (
    build_draft_extend_forward_batch,
    draft_extend_select_index,
    finish_draft_extend,
)

logger = logging.getLogger(__name__)


class LegacyEagleDraftWorker(EagleDraftWorker):
    """0.5.6 ``EAGLEWorker.draft`` / ``draft_forward`` /
    ``forward_draft_extend_after_decode`` on top of the v2 draft worker."""

    # expect: SG106
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_cuda_graph, kv_loc_plan = prepare_for_draft(
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
        if can_cuda_graph:
            parent_list, top_scores_index, draft_tokens, _ = (
                self.cuda_graph_runner.execute(forward_batch)
            )
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                # Skip attention backend init for idle mode or 1-step draft
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            # Run forward steps
            parent_list, top_scores_index, draft_tokens = self.draft_forward_legacy(
                forward_batch
            )

        if batch.forward_mode.is_idle():
            return EagleVerifyInput.create_idle_input(
                self.topk,
                self.speculative_num_steps,
                self.speculative_num_draft_tokens,
                self.device,
            )
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
        if with_topology:
            return verify_input, parent_list, top_scores_index
        return verify_input

    def draft_forward_legacy(self, forward_batch: ForwardBatch):
        spec_info: EagleDraftInput = forward_batch.spec_info
        out_cache_loc = forward_batch.out_cache_loc
        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
        )
        if self.hot_token_id is not None:
            topk_index = self.hot_token_id[topk_index]

        out_cache_loc = per_step_draft_out_cache_loc(
            out_cache_loc,
            forward_batch.batch_size,
            self.topk,
            self.speculative_num_steps,
        )

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

            # We don't need to run the last forward. we get 1 token from draft
            # prefill and (#spec steps - 1) tokens here
            if i == self.speculative_num_steps - 1:
                break

            forward_batch.input_ids = input_ids
            forward_batch.out_cache_loc = out_cache_loc[i]
            forward_batch.positions.add_(1)
            spec_info.hidden_states = hidden_states

            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                logits_output = self.draft_runner.forward(
                    forward_batch, skip_attn_backend_init=True
                ).logits_output
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            if self.hot_token_id is not None:
                topk_index = self.hot_token_id[topk_index]
            hidden_states = logits_output.hidden_states

        parent_list, top_scores_index, draft_tokens = organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )
        return parent_list, top_scores_index, draft_tokens

    # expect: SG106
    def forward_draft_extend_after_decode(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        forward_batch = build_draft_extend_forward_batch(
            batch, self.draft_runner, batch_result, self.speculative_num_draft_tokens
        )
        if forward_batch.seq_lens_cpu is not None:
            forward_batch.seq_lens_sum = forward_batch.seq_lens_cpu.sum().item()
        else:
            forward_batch.seq_lens_sum = batch.seq_lens.sum().item()

        # Run
        can_cuda_graph = (
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            logits_output = self.draft_runner.forward(
                forward_batch, skip_attn_backend_init=True
            ).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=bool(can_cuda_graph),
        )

    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        self.forward_draft_extend_after_decode(batch, batch_result)


class LegacyAttnDpDraftWorker(EagleDraftWorker):
    """0.5.6 call shape, but the runner owns planning: the old pre-plan was
    dropped when the fork moved to attention DP."""

    # expect: clean
    def forward_draft_extend_after_decode(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        select_index = draft_extend_select_index(
            batch,
            batch_result.accept_lens,
            self.speculative_num_draft_tokens,
            self.device,
        )
        forward_batch = build_draft_extend_forward_batch(
            batch, self.draft_runner, batch_result, self.speculative_num_draft_tokens
        )
        if forward_batch.seq_lens_cpu is not None:
            forward_batch.seq_lens_sum = forward_batch.seq_lens_cpu.sum().item()
        else:
            forward_batch.seq_lens_sum = batch.seq_lens.sum().item()

        can_cuda_graph = (
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_cuda_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            logits_output = self.draft_runner.forward(
                forward_batch, skip_attn_backend_init=False
            ).logits_output
        finish_draft_extend(
            batch,
            batch_result,
            logits_output,
            select_index,
            topk=self.topk,
            ran_cuda_graph=bool(can_cuda_graph),
        )

    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        self.forward_draft_extend_after_decode(batch, batch_result)
