"""Multi-layer EAGLE (one MTP layer per draft step) eager draft-extend loop."""

from __future__ import annotations

import logging

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.speculative.multi_layer_eagle_utils import rotate_input_ids
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import MultiLayerEagleDraftWorker
from sglang.srt.utils.common import fast_topk

from blindsg25.common.batch_builders import build_draft_extend_forward_batch

logger = logging.getLogger(__name__)


class ForkMultiLayerEagleDraftWorker(MultiLayerEagleDraftWorker):
    def _chain_batch(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        forward_batch, select_index = build_draft_extend_forward_batch(
            self.draft_runner_list[0],
            batch,
            batch_result,
            self.speculative_num_steps + 1,
        )
        return forward_batch, select_index

    def _bind_step_pools(self, forward_batch, step: int):
        runner = self.draft_runner_list[step]
        forward_batch.req_to_token_pool = runner.req_to_token_pool
        forward_batch.token_to_kv_pool = runner.token_to_kv_pool
        return runner

    def _step_epilogue(self, forward_batch, logits_output, select_index, topk_p_list, topk_index_list):
        logits = logits_output.next_token_logits[select_index]
        topk_p, topk_index = fast_topk(torch.softmax(logits, dim=-1), self.topk, dim=-1)
        if forward_batch.extend_seq_lens is not None:
            rotate_input_ids(
                forward_batch.input_ids,
                forward_batch.extend_start_loc,
                forward_batch.extend_seq_lens,
                topk_index,
                select_index,
            )
        topk_p_list.append(topk_p)
        topk_index_list.append(topk_index)

    def _publish(self, batch_result, topk_p_list, topk_index_list):
        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = torch.cat(topk_p_list, dim=1)
        next_draft_input.topk_index = torch.cat(topk_index_list, dim=1)
        next_draft_input.hidden_states = None

    def _draft_extend_eager_steps(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/multi_layer_eagle_worker_v2.py _draft_extend_for_decode (eager loop, plan hoisted)
        # expect: SG106
        forward_batch, select_index = self._chain_batch(batch, batch_result)
        topk_p_list, topk_index_list = [], []
        if not forward_batch.forward_mode.is_idle():
            # All steps share geometry; plan once on runner 0 and reuse.
            self.draft_runner_list[0].attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        for step in range(self.speculative_num_steps):
            runner = self._bind_step_pools(forward_batch, step)
            out = runner.forward(forward_batch)
            self._step_epilogue(
                forward_batch, out.logits_output, select_index, topk_p_list, topk_index_list
            )
        self._publish(batch_result, topk_p_list, topk_index_list)

    def _draft_extend_eager_steps_unmarked(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/multi_layer_eagle_worker_v2.py _draft_extend_for_decode (left unmarked per step)
        # expect: clean
        forward_batch, select_index = self._chain_batch(batch, batch_result)
        topk_p_list, topk_index_list = [], []
        # Left unmarked: each de-tied runner has its own attn backend, so each
        # step's forward must init its own metadata post-pad.
        for step in range(self.speculative_num_steps):
            runner = self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
            out = runner.forward(forward_batch)
            self._step_epilogue(
                forward_batch, out.logits_output, select_index, topk_p_list, topk_index_list
            )
        self._publish(batch_result, topk_p_list, topk_index_list)

    def _draft_extend_eager_steps_replannable(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/multi_layer_eagle_worker_v2.py _draft_extend_for_decode (per-step plan, replan opt-in)
        # expect: clean
        forward_batch, select_index = self._chain_batch(batch, batch_result)
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            runner = self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                # Same backend object the runner's forward plans with.
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            out = runner.forward(forward_batch)
            self._step_epilogue(
                forward_batch, out.logits_output, select_index, topk_p_list, topk_index_list
            )
        self._publish(batch_result, topk_p_list, topk_index_list)
