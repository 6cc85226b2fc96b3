"""Multi-layer (de-tied MTP) draft extend loop and a graph-first draft."""

from __future__ import annotations

from typing import List

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)


class ForkMultiLayerDraftExtend(MultiLayerEagleDraftWorker):
    """Eager fallback of the multi-layer draft extend (no CUDA graph fits)."""

    def _bind_step_pools(self, forward_batch: ForwardBatch, step: int):
        runner = self.draft_runner_list[step]
        forward_batch.req_to_token_pool = runner.req_to_token_pool
        forward_batch.token_to_kv_pool = runner.token_to_kv_pool
        return runner

    # expect: SG106
    def _run_draft_extend_steps(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        step_logits = []
        for step in range(self.speculative_num_steps):
            runner = self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                # Each de-tied runner owns its backend: plan it for this step
                # and tell the forward not to plan again.
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            out = runner.forward(forward_batch).logits_output
            step_logits.append(out.next_token_logits[select_index])
        return step_logits


class ForkMultiLayerDraftExtendDP(ForkMultiLayerDraftExtend):
    # expect: clean
    def _run_draft_extend_steps(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        step_logits = []
        for step in range(self.speculative_num_steps):
            runner = self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                # Early plan for overlap only; left unmarked so each step's
                # forward plans its own backend again after DP padding.
                runner.attn_backend.init_forward_metadata(forward_batch)
            out = runner.forward(forward_batch).logits_output
            step_logits.append(out.next_token_logits[select_index])
        return step_logits


class GraphFirstDraftWorker(EagleDraftWorker):
    """Draft decode that relies on the draft CUDA graph's replay-time plan and
    otherwise leaves planning to the eager forward."""

    # expect: clean
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input = batch.spec_info
        forward_batch, can_run_cuda_graph, kv_loc_plan = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if can_run_cuda_graph:
            # Replay plans the padded graph batch itself.
            outs = self.cuda_graph_runner.execute(forward_batch)
        else:
            outs = self.draft_forward(forward_batch)
        parent_list, top_scores_index, draft_tokens, draft_probs = outs
        return build_eagle_verify_input(
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
