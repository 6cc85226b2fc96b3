"""Standalone (separate small model) draft workers used by the fork."""

from __future__ import annotations

from typing import Optional

import torch

from blindsg19.common.planning import PreplanMixin
from blindsg19.spec.draft_extend_prep import (
    build_draft_extend_batch,
    draft_extend_select_index,
)
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
)
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker
from sglang.srt.utils.common import fast_topk, require_mlp_sync


class StandaloneDPDraftWorker(PreplanMixin, StandaloneDraftWorker):
    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        ndt = self.speculative_num_draft_tokens
        select_index = draft_extend_select_index(batch_result.accept_lens, ndt)
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=None,  # standalone drafts do not read target hidden
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=ndt,
            num_tokens_for_logprob_per_req=ndt,
        )
        forward_batch = build_draft_extend_batch(
            draft_extend_input,
            batch,
            batch_result.next_token_ids.to(torch.int64),
            ndt,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            kv_loc_plan=kv_loc_plan,
        )
        graph_runner = self.cuda_graph_runner_for_draft_extend
        if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
            logits_output = graph_runner.execute(forward_batch, select_index)
        else:
            self._preplan(forward_batch)
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            logits_output.next_token_logits = logits_output.next_token_logits[
                select_index
            ]
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        batch_result.next_draft_input.topk_p = topk_p
        batch_result.next_draft_input.topk_index = topk_index

    # expect: clean
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
        else:
            if (
                forward_batch.global_num_tokens_cpu is not None
                and not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                # The multi-step plan cannot be redone by the runner after it
                # pads for the MLP sync; the standalone draft has no eager
                # fallback for that case.
                raise RuntimeError(
                    "standalone eager draft with MLP-sync padding is unsupported; "
                    "keep the draft decode cuda graph enabled"
                )
            if not forward_batch.forward_mode.is_idle() and self.speculative_num_steps > 1:
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

    # expect: SG106
    def _draft_extend_with_graph_fallback(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ) -> torch.Tensor:
        ndt = self.speculative_num_draft_tokens
        select_index = draft_extend_select_index(batch_result.accept_lens, ndt)
        forward_batch = build_draft_extend_batch(
            EagleDraftExtendInput(
                num_correct_drafts=batch_result.accept_lens - 1,
                num_accept_tokens=batch_result.accept_lens,
                num_tokens_per_req=ndt,
                num_tokens_for_logprob_per_req=ndt,
            ),
            batch,
            batch_result.next_token_ids.to(torch.int64),
            ndt,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            kv_loc_plan=kv_loc_plan,
        )
        graph_runner = self.cuda_graph_runner_for_draft_extend
        use_graph = graph_runner is not None and graph_runner.can_run_graph(
            forward_batch
        )
        planned_here = not use_graph and not forward_batch.forward_mode.is_idle()
        if planned_here:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)

        if use_graph:
            return graph_runner.execute(forward_batch, select_index).next_token_logits

        if planned_here:
            forward_batch.mark_forward_metadata_ready()
        out = self.draft_runner.forward(forward_batch).logits_output
        return out.next_token_logits[select_index]


class StrictStandaloneDraftWorker(StandaloneDraftWorker):
    """Standalone draft for single-rank attention deployments only."""

    def __init__(self, server_args, gpu_id, nccl_port, target_worker):
        if require_mlp_sync():
            raise ValueError(
                "StrictStandaloneDraftWorker pre-plans its draft-extend batch and "
                "cannot run with DP attention / MLP-sync padding"
            )
        super().__init__(server_args, gpu_id, nccl_port, target_worker)

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        ndt = self.speculative_num_draft_tokens
        select_index = draft_extend_select_index(batch_result.accept_lens, ndt)
        forward_batch = build_draft_extend_batch(
            EagleDraftExtendInput(
                num_correct_drafts=batch_result.accept_lens - 1,
                num_accept_tokens=batch_result.accept_lens,
                num_tokens_per_req=ndt,
                num_tokens_for_logprob_per_req=ndt,
            ),
            batch,
            batch_result.next_token_ids.to(torch.int64),
            ndt,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            kv_loc_plan=kv_loc_plan,
        )
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        probs = torch.softmax(logits_output.next_token_logits[select_index], dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        batch_result.next_draft_input.topk_p = topk_p
        batch_result.next_draft_input.topk_index = topk_index
