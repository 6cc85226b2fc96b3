"""Multi-layer EAGLE and frozen-KV MTP draft-worker overrides."""

from __future__ import annotations

import logging
from typing import List

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.utils.common import fast_topk, is_npu

from blindsg8.spec._plan import pad_for_mlp_sync

logger = logging.getLogger(__name__)


class _FrozenKVSeedMixin(FrozenKVMTPDraftWorker):
    """topk == 1 frozen-KV draft loop: one seed iteration + recurrent iters,
    every iteration reading the same `seq_lens - 1` rope position (so one
    metadata plan covers the whole loop)."""

    def _run_frozen_kv_iters(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        forward_batch.input_ids = spec_info.bonus_tokens
        forward_batch.spec_info.hidden_states = spec_info.hidden_states
        self._set_positions(forward_batch)

        token_list: List[torch.Tensor] = []
        for step in range(self.speculative_num_steps):
            with (
                self._target_kv_pool_view(forward_batch),
                forward_context(
                    ForwardContext(attn_backend=self.draft_attn_backend),
                    forward_batch=forward_batch,
                ),
            ):
                out = self.draft_model_runner.forward(forward_batch).logits_output
            probs = torch.softmax(out.next_token_logits, dim=-1)
            _, topk_index = fast_topk(probs, 1, dim=-1)
            token_list.append(topk_index)
            forward_batch.input_ids = topk_index.flatten()
            forward_batch.spec_info.hidden_states = out.hidden_states
        return torch.cat(token_list, dim=1)


class EagerFrozenKVMTPDraftWorker(_FrozenKVSeedMixin):
    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        # One init covers the loop; upstream's helper plans under the
        # target-KV view and marks the batch.
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        return self._run_frozen_kv_iters(forward_batch)


class PrePadFrozenKVMTPDraftWorker(_FrozenKVSeedMixin):
    # expect: clean
    def draft_forward(self, forward_batch: ForwardBatch):
        # The view-context plan cannot be redone by ModelRunner (it plans
        # outside the target-KV view), so apply the DP padding first and plan
        # the padded batch ourselves.
        if forward_batch.needs_forward_metadata_init():
            pad_for_mlp_sync(forward_batch, self.draft_model_runner)
            self._init_frozen_kv_metadata(forward_batch)
        return self._run_frozen_kv_iters(forward_batch)


class _MtpExtendMixin(MultiLayerEagleDraftWorker):
    def _build_mtp_extend_batch(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ) -> ForwardBatch:
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_tokens_per_req=self.speculative_num_steps + 1,
            num_tokens_for_logprob_per_req=1,
        )
        batch.input_ids = batch_result.next_token_ids
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

    def _bind_step_pools(self, forward_batch: ForwardBatch, step: int) -> None:
        forward_batch.req_to_token_pool = self.draft_runner_list[step].req_to_token_pool
        forward_batch.token_to_kv_pool = self.draft_runner_list[step].token_to_kv_pool

    def _collect(self, batch_result, topk_p_list, topk_index_list):
        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = torch.cat(topk_p_list, dim=1)
        next_draft_input.topk_index = torch.cat(topk_index_list, dim=1)
        next_draft_input.hidden_states = None
        return next_draft_input


class SharedPlanMultiLayerEagleDraftWorker(_MtpExtendMixin):
    """All MTP layers share one page table, so plan once for the chain."""

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        staged: bool = False,
        kv_loc_plan=None,
    ):
        forward_batch = self._build_mtp_extend_batch(batch, batch_result)
        select_index = (
            torch.arange(len(batch.seq_lens), device=self.device)
            * self.speculative_num_draft_tokens
            + batch_result.accept_lens
            - 1
        )
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner_list[0].attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            out = self.draft_runner_list[step].forward(forward_batch).logits_output
            probs = torch.softmax(out.next_token_logits[select_index], dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return self._collect(batch_result, topk_p_list, topk_index_list)


class PerStepPlanMultiLayerEagleDraftWorker(_MtpExtendMixin):
    """Upstream's eager draft-extend shape: every de-tied runner plans its own
    backend and the batch stays unmarked."""

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        staged: bool = False,
        kv_loc_plan=None,
    ):
        forward_batch = self._build_mtp_extend_batch(batch, batch_result)
        select_index = (
            torch.arange(len(batch.seq_lens), device=self.device)
            * self.speculative_num_draft_tokens
            + batch_result.accept_lens
            - 1
        )
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            self._bind_step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner_list[step].attn_backend.init_forward_metadata(
                    forward_batch
                )
            out = self.draft_runner_list[step].forward(forward_batch).logits_output
            probs = torch.softmax(out.next_token_logits[select_index], dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
        return self._collect(batch_result, topk_p_list, topk_index_list)


class NpuGatedMultiLayerEagleDraftWorker(_MtpExtendMixin):
    # expect: SG106
    def _run_mtp_first_layer(self, forward_batch: ForwardBatch):
        runner = self.draft_runner_list[0]
        if not forward_batch.forward_mode.is_idle():
            runner.attn_backend.init_forward_metadata(forward_batch)
            # On NPU the block_table shape won't match after
            # prepare_mlp_sync_batch padding; let forward_extend re-init there.
            if not is_npu():
                forward_batch.mark_forward_metadata_ready()
        return runner.forward(forward_batch).logits_output


class DpGatedMultiLayerEagleDraftWorker(_MtpExtendMixin):
    # expect: clean
    def _run_mtp_first_layer(self, forward_batch: ForwardBatch):
        runner = self.draft_runner_list[0]
        if not forward_batch.forward_mode.is_idle():
            runner.attn_backend.init_forward_metadata(forward_batch)
            # Padding (NPU block tables, or DP attention's MLP sync) happens
            # after us; only keep the pre-plan where neither applies.
            if not is_npu() and not self.server_args.enable_dp_attention:
                forward_batch.mark_forward_metadata_ready()
        return runner.forward(forward_batch).logits_output
