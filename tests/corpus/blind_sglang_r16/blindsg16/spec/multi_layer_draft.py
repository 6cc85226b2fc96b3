# Copyright 2023-2026 SGLang Team
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# ==============================================================================
"""Multi-layer EAGLE (chained MTP heads) draft-extend loops.

Each MTP head owns a de-tied ModelRunner (``draft_runner_list[step]``) with its
own attention backend; the eager draft extend runs the heads one after the
other over the same forward batch.
"""

from __future__ import annotations

import logging
from typing import List, Optional, Tuple

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.multi_layer_eagle_utils import rotate_input_ids
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.utils.common import fast_topk, require_mlp_sync

from blindsg16.runtime.batch_plan import build_draft_extend_forward_batch

logger = logging.getLogger(__name__)


class _StepPlanner:
    """Shared per-head planning helpers."""

    draft_runner_list: list

    def _bind_step_pools(self, step: int, forward_batch: ForwardBatch) -> None:
        runner = self.draft_runner_list[step]
        forward_batch.req_to_token_pool = runner.req_to_token_pool
        forward_batch.token_to_kv_pool = runner.token_to_kv_pool

    def _plan_step(self, step: int, forward_batch: ForwardBatch) -> None:
        self._bind_step_pools(step, forward_batch)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner_list[step].attn_backend.init_forward_metadata(
                forward_batch
            )


class ChainedMultiLayerDraftWorker(_StepPlanner, MultiLayerEagleDraftWorker):
    def configure_step_planning(self) -> None:
        self._replan_equivalent = False
        self._chain_hidden = bool(getattr(self, "chain_mtp_hidden_states", False))

    def _build_extend_batch(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ) -> Tuple[ForwardBatch, torch.Tensor, bool]:
        width = self.speculative_num_steps + 1
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_tokens_per_req=width,
            num_tokens_for_logprob_per_req=1,
        )
        forward_batch = build_draft_extend_forward_batch(
            draft_extend_input,
            batch,
            batch_result.next_token_ids,
            width,
            self.draft_runner_list[0],
        )
        select_index = (
            torch.arange(len(batch.seq_lens), device=self.device) * width
            + batch_result.accept_lens
            - 1
        )
        can_run = bool(
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        return forward_batch, select_index, can_run

    def _advance(
        self,
        forward_batch: ForwardBatch,
        logits_output,
        select_index: torch.Tensor,
        step: int,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        probs = torch.softmax(logits_output.next_token_logits[select_index], dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        if (
            self.chain_mtp_hidden_states
            and step < self.speculative_num_steps - 1
            and logits_output.hidden_states is not None
        ):
            forward_batch.spec_info.hidden_states = logits_output.hidden_states
        if forward_batch.extend_seq_lens is not None:
            rotate_input_ids(
                forward_batch.input_ids,
                forward_batch.extend_start_loc,
                forward_batch.extend_seq_lens,
                topk_index,
                select_index,
            )
        return topk_p, topk_index

    # expect: clean
    def _run_extend_steps_per_head(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(step, forward_batch)
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner_list[step].attn_backend.init_forward_metadata(
                    forward_batch
                )
            out = self.draft_runner_list[step].forward(forward_batch)
            topk_p, topk_index = self._advance(
                forward_batch, out.logits_output, select_index, step
            )
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return topk_p_list, topk_index_list

    # expect: SG106
    def _run_extend_steps(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(step, forward_batch)
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner_list[step].attn_backend.init_forward_metadata(
                    forward_batch
                )
                forward_batch.mark_forward_metadata_ready()
            out = self.draft_runner_list[step].forward(forward_batch)
            topk_p, topk_index = self._advance(
                forward_batch, out.logits_output, select_index, step
            )
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return topk_p_list, topk_index_list

    # expect: SG106
    def _run_extend_steps_inherited_plan(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            self._plan_step(step, forward_batch)
            forward_batch.mark_forward_metadata_ready()
            out = self.draft_runner_list[step].forward(forward_batch)
            topk_p, topk_index = self._advance(
                forward_batch, out.logits_output, select_index, step
            )
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return topk_p_list, topk_index_list

    # expect: clean
    def _run_extend_steps_recorded(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            self._plan_step(step, forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            out = self.draft_runner_list[step].forward(forward_batch)
            topk_p, topk_index = self._advance(
                forward_batch, out.logits_output, select_index, step
            )
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return topk_p_list, topk_index_list

    # expect: SG106
    def _run_extend_steps_configured(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        if not hasattr(self, "_replan_equivalent"):
            self.configure_step_planning()
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            self._plan_step(step, forward_batch)
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=self._replan_equivalent
            )
            out = self.draft_runner_list[step].forward(forward_batch)
            topk_p, topk_index = self._advance(
                forward_batch, out.logits_output, select_index, step
            )
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return topk_p_list, topk_index_list

    # expect: SG106
    def _run_extend_steps_skip(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            self._plan_step(step, forward_batch)
            out = self.draft_runner_list[step].forward(
                forward_batch,
                skip_attn_backend_init=not forward_batch.forward_mode.is_idle(),
            )
            topk_p, topk_index = self._advance(
                forward_batch, out.logits_output, select_index, step
            )
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return topk_p_list, topk_index_list

    # expect: clean
    def _run_extend_steps_skip_reuse(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        reuse = not require_mlp_sync()
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            self._plan_step(step, forward_batch)
            out = self.draft_runner_list[step].forward(
                forward_batch,
                skip_attn_backend_init=reuse and not forward_batch.forward_mode.is_idle(),
            )
            topk_p, topk_index = self._advance(
                forward_batch, out.logits_output, select_index, step
            )
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return topk_p_list, topk_index_list

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        staged: bool = False,
        kv_loc_plan=None,
    ):
        forward_batch, select_index, can_run = self._build_extend_batch(
            batch, batch_result
        )
        if can_run:
            cgr = self.cuda_graph_runner_for_draft_extend
            cgr.prepare(forward_batch, staged=staged)
            outs = [cgr.replay(step) for step in range(self.speculative_num_steps)]
            topk_p_list = [o[1].clone() for o in outs]
            topk_index_list = [o[2].clone() for o in outs]
        else:
            if not forward_batch.forward_mode.is_idle():
                self._plan_step(0, forward_batch)
                forward_batch.mark_forward_metadata_ready()
            topk_p_list, topk_index_list = [], []
            for step in range(self.speculative_num_steps):
                self._bind_step_pools(step, forward_batch)
                out = self.draft_runner_list[step].forward(forward_batch)
                topk_p, topk_index = self._advance(
                    forward_batch, out.logits_output, select_index, step
                )
                topk_p_list.append(topk_p)
                topk_index_list.append(topk_index)

        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = torch.cat(topk_p_list, dim=1)
        next_draft_input.topk_index = torch.cat(topk_index_list, dim=1)
