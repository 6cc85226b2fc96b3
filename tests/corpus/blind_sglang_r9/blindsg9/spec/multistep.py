"""Multi-layer EAGLE and frozen-KV MTP draft loops of the fork."""

from __future__ import annotations

import logging
from typing import List

import torch

from sglang.srt.layers.dp_attention import is_dp_attention_enabled
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.runtime_context import get_parallel, get_spec
from sglang.srt.server_args import ServerArgs
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)

logger = logging.getLogger(__name__)


def _rotate_chain(forward_batch: ForwardBatch, topk_index: torch.Tensor) -> None:
    forward_batch.input_ids = torch.roll(forward_batch.input_ids, -1)
    forward_batch.input_ids[-topk_index.shape[0] :] = topk_index.flatten()


class ForkMultiLayerEagleDraftWorker(MultiLayerEagleDraftWorker):
    # expect: SG106
    def _draft_extend_steps(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                # Each de-tied runner got its own plan right above.
                forward_batch.mark_forward_metadata_ready()
            out = runner.forward(forward_batch).logits_output
            probs = torch.softmax(out.next_token_logits[select_index], dim=-1)
            topk_p, topk_index = torch.topk(probs, self.topk, dim=-1)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
            if step < self.speculative_num_steps - 1:
                _rotate_chain(forward_batch, topk_index)
                forward_batch.spec_info.hidden_states = out.hidden_states
        return [torch.cat(topk_p_list, dim=1), torch.cat(topk_index_list, dim=1)]


class DPSafeMultiLayerEagleDraftWorker(MultiLayerEagleDraftWorker):
    # expect: clean
    def _draft_extend_steps(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        topk_p_list, topk_index_list = [], []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
            # Left unmarked: the runner re-plans post-pad for this step.
            out = runner.forward(forward_batch).logits_output
            probs = torch.softmax(out.next_token_logits[select_index], dim=-1)
            topk_p, topk_index = torch.topk(probs, self.topk, dim=-1)
            topk_p_list.append(topk_p)
            topk_index_list.append(topk_index)
            if step < self.speculative_num_steps - 1:
                _rotate_chain(forward_batch, topk_index)
                forward_batch.spec_info.hidden_states = out.hidden_states
        return [torch.cat(topk_p_list, dim=1), torch.cat(topk_index_list, dim=1)]


class ForkFrozenKVMTPDraftWorker(FrozenKVMTPDraftWorker):
    def __init__(
        self,
        server_args: ServerArgs,
        gpu_id: int,
        nccl_port: int,
        target_worker: TpModelWorker,
    ):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        # Reuse the seed plan for the recurrent iterations when drafting deep.
        self._reuse_seed_plan = get_spec().speculative_num_steps > 1

    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return super().draft_forward(forward_batch)
        with self._frozen_kv_target_view(forward_batch):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

        spec_info = forward_batch.spec_info
        forward_batch.input_ids = spec_info.bonus_tokens
        forward_batch.spec_info.hidden_states = spec_info.hidden_states
        self._set_positions(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_model_runner.forward(forward_batch).logits_output
        return seed_output

    # expect: SG106
    def _seed_forward(self, forward_batch: ForwardBatch):
        if self._reuse_seed_plan and not forward_batch.forward_mode.is_idle():
            self._init_frozen_kv_metadata(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            return self.draft_model_runner.forward(forward_batch).logits_output


class DPSafeFrozenKVMTPDraftWorker(FrozenKVMTPDraftWorker):
    def __init__(
        self,
        server_args: ServerArgs,
        gpu_id: int,
        nccl_port: int,
        target_worker: TpModelWorker,
    ):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        # DP attention pads the seed batch inside the runner; only reuse the
        # seed plan when nothing can pad it.
        self._reuse_seed_plan = (
            get_spec().speculative_num_steps > 1 and not is_dp_attention_enabled()
        )

    # expect: clean
    def draft_forward(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return super().draft_forward(forward_batch)
        with self._frozen_kv_target_view(forward_batch):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        if get_parallel().attn_dp_size == 1:
            forward_batch.mark_forward_metadata_ready()
        # With DP attention the runner plans post-pad, under the target pool
        # view installed below.

        spec_info = forward_batch.spec_info
        forward_batch.input_ids = spec_info.bonus_tokens
        forward_batch.spec_info.hidden_states = spec_info.hidden_states
        self._set_positions(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_model_runner.forward(forward_batch).logits_output
        return seed_output

    # expect: clean
    def _seed_forward(self, forward_batch: ForwardBatch):
        if self._reuse_seed_plan and not forward_batch.forward_mode.is_idle():
            self._init_frozen_kv_metadata(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            return self.draft_model_runner.forward(forward_batch).logits_output


class NoDPFrozenKVMTPDraftWorker(FrozenKVMTPDraftWorker):
    """Fork variant that refuses DP attention up front."""

    def __init__(
        self,
        server_args: ServerArgs,
        gpu_id: int,
        nccl_port: int,
        target_worker: TpModelWorker,
    ):
        if server_args.enable_dp_attention:
            raise ValueError(
                "NoDPFrozenKVMTPDraftWorker does not support --enable-dp-attention"
            )
        super().__init__(server_args, gpu_id, nccl_port, target_worker)

    # expect: clean
    def _seed_forward(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            with self._frozen_kv_target_view(forward_batch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        with self._target_kv_pool_view(forward_batch):
            return self.draft_model_runner.forward(forward_batch).logits_output
