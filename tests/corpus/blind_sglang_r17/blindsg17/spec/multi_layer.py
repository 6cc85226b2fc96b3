"""Multi-layer EAGLE (chained MTP heads) eager draft-extend variants.

Each draft step has its own ``ModelRunner`` (``draft_runner_list[step]``) and
its own attention backend. The CUDA-graph path is unchanged; these methods
replace the eager fallback of ``MultiLayerEagleDraftWorker``.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator, List

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.utils.common import fast_topk

from blindsg17.spec.plan_policy import draft_extend_select_index, pad_for_mlp_sync

logger = logging.getLogger(__name__)


class ChainedMTPDraftWorker(MultiLayerEagleDraftWorker):
    def _new_chain_batch(self, batch: ScheduleBatch, batch_result) -> ForwardBatch:
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        batch.forward_mode = (
            ForwardMode.IDLE
            if batch.forward_mode.is_idle()
            else ForwardMode.DRAFT_EXTEND_V2
        )
        return ForwardBatch.init_new(
            batch,
            self.draft_runner_list[0],
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=True,
        )

    def _bind_step_pools(self, forward_batch: ForwardBatch, step: int) -> ModelRunner:
        runner = self.draft_runner_list[step]
        forward_batch.req_to_token_pool = runner.req_to_token_pool
        forward_batch.token_to_kv_pool = runner.token_to_kv_pool
        return runner

    def _collect(self, logits, select_index, topk_p_list, topk_index_list):
        probs = torch.softmax(logits[select_index], dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        topk_p_list.append(topk_p)
        topk_index_list.append(topk_index)

    # expect: SG106
    def draft_extend_chain(self, batch: ScheduleBatch, batch_result):
        forward_batch = self._new_chain_batch(batch, batch_result)
        select_index = draft_extend_select_index(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        topk_p_list: List[torch.Tensor] = []
        topk_index_list: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            runner = self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            out = runner.forward(forward_batch)
            self._collect(
                out.logits_output.next_token_logits,
                select_index,
                topk_p_list,
                topk_index_list,
            )
            if out.logits_output.hidden_states is not None:
                forward_batch.spec_info.hidden_states = out.logits_output.hidden_states
        return torch.cat(topk_p_list, dim=1), torch.cat(topk_index_list, dim=1)

    # expect: clean
    def draft_extend_chain_inline(self, batch: ScheduleBatch, batch_result):
        forward_batch = self._new_chain_batch(batch, batch_result)
        select_index = draft_extend_select_index(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        topk_p_list: List[torch.Tensor] = []
        topk_index_list: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            runner = self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
            out = runner.forward(forward_batch)
            self._collect(
                out.logits_output.next_token_logits,
                select_index,
                topk_p_list,
                topk_index_list,
            )
        return torch.cat(topk_p_list, dim=1), torch.cat(topk_index_list, dim=1)

    # expect: clean
    def draft_extend_chain_enumerated(self, batch: ScheduleBatch, batch_result):
        forward_batch = self._new_chain_batch(batch, batch_result)
        select_index = draft_extend_select_index(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        topk_p_list: List[torch.Tensor] = []
        topk_index_list: List[torch.Tensor] = []
        for step, runner in enumerate(self.draft_runner_list):
            if step >= self.speculative_num_steps:
                break
            self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            out = runner.forward(forward_batch)
            self._collect(
                out.logits_output.next_token_logits,
                select_index,
                topk_p_list,
                topk_index_list,
            )
        return torch.cat(topk_p_list, dim=1), torch.cat(topk_index_list, dim=1)

    # expect: SG106
    def iter_chain_logits_v2(self, forward_batch: ForwardBatch) -> Iterator[torch.Tensor]:
        for step in range(self.speculative_num_steps):
            runner = self._bind_step_pools(forward_batch, step)
            if forward_batch.forward_mode.is_idle():
                yield runner.forward(forward_batch).logits_output.next_token_logits
                continue
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            logits_output = runner.forward(forward_batch).logits_output
            if logits_output.hidden_states is not None:
                forward_batch.spec_info.hidden_states = logits_output.hidden_states
            yield logits_output.next_token_logits

    # expect: clean
    def iter_chain_logits(
        self, forward_batch: ForwardBatch
    ) -> Iterator[torch.Tensor]:
        for step in range(self.speculative_num_steps):
            runner = self._bind_step_pools(forward_batch, step)
            if forward_batch.forward_mode.is_idle():
                yield runner.forward(forward_batch).logits_output.next_token_logits
                continue
            pad_for_mlp_sync(forward_batch, runner)
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            logits_output = runner.forward(forward_batch).logits_output
            if logits_output.hidden_states is not None:
                forward_batch.spec_info.hidden_states = logits_output.hidden_states
            yield logits_output.next_token_logits

    @contextlib.contextmanager
    def _planned(
        self,
        forward_batch: ForwardBatch,
        runner: ModelRunner,
        *,
        replan_equivalent: bool,
    ):
        if forward_batch.forward_mode.is_idle():
            yield forward_batch
            return
        runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
        try:
            yield forward_batch
        finally:
            forward_batch.forward_metadata_ready = False

    # expect: SG106
    def draft_extend_chain_scoped(self, batch: ScheduleBatch, batch_result):
        forward_batch = self._new_chain_batch(batch, batch_result)
        select_index = draft_extend_select_index(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        topk_p_list: List[torch.Tensor] = []
        topk_index_list: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            runner = self._bind_step_pools(forward_batch, step)
            with self._planned(forward_batch, runner, replan_equivalent=False):
                out = runner.forward(forward_batch)
            self._collect(
                out.logits_output.next_token_logits,
                select_index,
                topk_p_list,
                topk_index_list,
            )
        return torch.cat(topk_p_list, dim=1), torch.cat(topk_index_list, dim=1)

    # expect: clean
    def draft_extend_chain_with_scope(self, batch: ScheduleBatch, batch_result):
        forward_batch = self._new_chain_batch(batch, batch_result)
        select_index = draft_extend_select_index(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        topk_p_list: List[torch.Tensor] = []
        topk_index_list: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            runner = self._bind_step_pools(forward_batch, step)
            with self._planned(forward_batch, runner, replan_equivalent=True):
                out = runner.forward(forward_batch)
            self._collect(
                out.logits_output.next_token_logits,
                select_index,
                topk_p_list,
                topk_index_list,
            )
        return torch.cat(topk_p_list, dim=1), torch.cat(topk_index_list, dim=1)
