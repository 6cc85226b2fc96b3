"""Kestrel MTP workers: multi-layer EAGLE and frozen-KV MTP overrides."""

from __future__ import annotations

from typing import List, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft_extend
from sglang.srt.speculative.frozen_kv_mtp_info import FrozenKVMTPDraftInput
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.utils.common import fast_topk

from blindsg38.vendor_config import KestrelParallelConfig, dp_attention_active


def _topk_from_logits(logits: torch.Tensor, topk: int):
    probs = torch.softmax(logits, dim=-1)
    return fast_topk(probs, topk, dim=-1)


class KestrelMultiLayerEagleDraftWorker(MultiLayerEagleDraftWorker):
    # idiom: speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode (eager branch)
    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        staged: bool = False,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_tokens_per_req=self.speculative_num_steps + 1,
            num_tokens_for_logprob_per_req=1,
        )
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                draft_extend_input,
                batch,
                batch_result.next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner_list[0],
                None,
                return_hidden_states_before_norm=True,
                kv_loc_plan=kv_loc_plan,
            )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        select_index = (
            torch.arange(len(batch.seq_lens), device=self.device)
            * self.speculative_num_draft_tokens
            + batch_result.accept_lens
            - 1
        )
        ret_topk_p_list, ret_topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
            out = runner.forward(forward_batch).logits_output
            topk_p, topk_index = _topk_from_logits(
                out.next_token_logits[select_index], self.topk
            )
            ret_topk_p_list.append(topk_p)
            ret_topk_index_list.append(topk_index)
        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = torch.cat(ret_topk_p_list, dim=1)
        next_draft_input.topk_index = torch.cat(ret_topk_index_list, dim=1)


class KestrelMultiLayerEagleDraftWorkerDP(KestrelMultiLayerEagleDraftWorker):
    # idiom: speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode (eager branch)
    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        staged: bool = False,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_tokens_per_req=self.speculative_num_steps + 1,
            num_tokens_for_logprob_per_req=1,
        )
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                draft_extend_input,
                batch,
                batch_result.next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner_list[0],
                None,
                return_hidden_states_before_norm=True,
                kv_loc_plan=kv_loc_plan,
            )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        select_index = (
            torch.arange(len(batch.seq_lens), device=self.device)
            * self.speculative_num_draft_tokens
            + batch_result.accept_lens
            - 1
        )
        # Each de-tied runner owns its backend.
        forward_batch.forward_metadata_ready = False
        ret_topk_p_list, ret_topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
            out = runner.forward(forward_batch).logits_output
            topk_p, topk_index = _topk_from_logits(
                out.next_token_logits[select_index], self.topk
            )
            ret_topk_p_list.append(topk_p)
            ret_topk_index_list.append(topk_index)
        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = torch.cat(ret_topk_p_list, dim=1)
        next_draft_input.topk_index = torch.cat(ret_topk_index_list, dim=1)


class KestrelFrozenKVMTPDraftWorker(FrozenKVMTPDraftWorker):
    def _seed_inputs(self, spec_info: FrozenKVMTPDraftInput):
        if self.topk > 1:
            return (
                spec_info.bonus_tokens.repeat_interleave(self.topk, dim=0),
                spec_info.hidden_states.repeat_interleave(self.topk, dim=0),
            )
        return spec_info.bonus_tokens, spec_info.hidden_states

    # idiom: speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward (seed iter)
    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        assert isinstance(spec_info, FrozenKVMTPDraftInput)
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)

        seed_input_ids, seed_prev_hidden = self._seed_inputs(spec_info)
        forward_batch.input_ids = seed_input_ids
        forward_batch.spec_info.hidden_states = seed_prev_hidden
        self._set_positions(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_model_runner.forward(forward_batch).logits_output
        seed_logits = seed_output.next_token_logits[:: self.topk]
        return _topk_from_logits(seed_logits, self.topk), seed_output.hidden_states


class KestrelFrozenKVMTPDraftWorkerPadded(KestrelFrozenKVMTPDraftWorker):
    # idiom: speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward (seed iter)
    # expect: clean
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        assert isinstance(spec_info, FrozenKVMTPDraftInput)
        real_bs = forward_batch.batch_size
        if forward_batch.needs_forward_metadata_init():
            if forward_batch.global_num_tokens_cpu is not None:
                forward_batch.prepare_mlp_sync_batch(self.draft_model_runner)
            self._init_frozen_kv_metadata(forward_batch)

        seed_input_ids, seed_prev_hidden = self._seed_inputs(spec_info)
        forward_batch.input_ids = seed_input_ids
        forward_batch.spec_info.hidden_states = seed_prev_hidden
        self._set_positions(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_model_runner.forward(forward_batch).logits_output
        seed_logits = seed_output.next_token_logits[: real_bs * self.topk : self.topk]
        return _topk_from_logits(seed_logits, self.topk), seed_output.hidden_states


class KestrelDraftExtendBase:
    """Mixin: eager draft-extend on the draft runner's own backend."""

    draft_runner = None
    server_args = None

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend + draft_runner.forward
    # expect: clean
    def _run_draft_extend(self, forward_batch: ForwardBatch):
        backend = self.draft_runner.attn_backend
        if not forward_batch.forward_mode.is_idle():
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.draft_runner.forward(forward_batch).logits_output


class KestrelFastDraftExtend(KestrelDraftExtendBase):
    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend + draft_runner.forward
    # expect: SG106
    def _run_draft_extend(self, forward_batch: ForwardBatch):
        backend = self.draft_runner.attn_backend
        if not forward_batch.forward_mode.is_idle():
            backend.init_forward_metadata(forward_batch)
            # The re-plan is pure overhead on Kestrel: metadata is shape-stable.
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output


class KestrelLegacyExtendBase:
    """Mixin kept for the 0.5.x MTP checkpoints (draft extend in one forward)."""

    draft_runner = None
    server_args = None

    # idiom: sglang 0.5.6 speculative/eagle_worker_v2.py _draft_extend_for_decode (skip_attn_backend_init=True)
    # expect: SG106
    def _run_draft_extend(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        logits_output = self.draft_runner.forward(
            forward_batch, skip_attn_backend_init=True
        ).logits_output
        return logits_output


class KestrelGuardedLegacyExtend(KestrelLegacyExtendBase):
    # idiom: sglang 0.5.6 speculative/eagle_worker_v2.py _draft_extend_for_decode (skip_attn_backend_init=True)
    # expect: clean
    def _run_draft_extend(self, forward_batch: ForwardBatch):
        if dp_attention_active(self.server_args):
            return self.draft_runner.forward(forward_batch).logits_output
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        logits_output = self.draft_runner.forward(
            forward_batch, skip_attn_backend_init=True
        ).logits_output
        return logits_output
