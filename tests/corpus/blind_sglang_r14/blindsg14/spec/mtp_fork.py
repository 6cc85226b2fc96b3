"""Frozen-KV MTP, multi-layer EAGLE and target-verify hooks for the fork."""

from __future__ import annotations

import contextlib
from typing import List, Optional

import torch

from sglang.srt.layers.dp_attention import is_dp_attention_enabled
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_utils import eagle_prepare_for_verify
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.utils.common import fast_topk


class ForkFrozenKVMTPDraftWorker(FrozenKVMTPDraftWorker):
    """Frozen-KV MTP draft with an explicit seed-forward entry point."""

    @contextlib.contextmanager
    def _seed_scope(self, forward_batch: ForwardBatch):
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            yield

    def _seed_inputs(self, forward_batch: ForwardBatch) -> None:
        spec_info = forward_batch.spec_info
        if self.topk > 1:
            forward_batch.input_ids = spec_info.bonus_tokens.repeat_interleave(
                self.topk, dim=0
            )
            spec_info.hidden_states = spec_info.hidden_states.repeat_interleave(
                self.topk, dim=0
            )
        else:
            forward_batch.input_ids = spec_info.bonus_tokens
        self._set_positions(forward_batch)

    # expect: SG106
    def seed_forward_eager(self, forward_batch: ForwardBatch):
        # One plan for seed + recurrent steps (shared rope position).
        self._init_frozen_kv_metadata(forward_batch)
        self._seed_inputs(forward_batch)
        with self._seed_scope(forward_batch):
            out = self.draft_model_runner.forward(forward_batch).logits_output
        probs = torch.softmax(out.next_token_logits[:: self.topk], dim=-1)
        return fast_topk(probs, self.topk, dim=-1), out.hidden_states

    # expect: clean
    def seed_forward_eager_refuse_dp(self, forward_batch: ForwardBatch):
        if is_dp_attention_enabled():
            # The frozen-KV plan is built under the target view and cannot be
            # re-planned by the forward; a DP-padded eager forward would run on
            # the pre-pad plan.  Only the graph path supports DP attention.
            raise RuntimeError(
                "frozen-KV MTP eager seed forward is unsupported with DP attention"
            )
        self._init_frozen_kv_metadata(forward_batch)
        self._seed_inputs(forward_batch)
        with self._seed_scope(forward_batch):
            out = self.draft_model_runner.forward(forward_batch).logits_output
        probs = torch.softmax(out.next_token_logits[:: self.topk], dim=-1)
        return fast_topk(probs, self.topk, dim=-1), out.hidden_states

    # expect: clean
    def seed_forward_prepadded(self, forward_batch: ForwardBatch):
        runner = self.draft_model_runner
        # Pad for DP attention first, so the frozen-view plan sees final shapes.
        runner._prepare_eager_forward_batch(forward_batch)
        self._init_frozen_kv_metadata(forward_batch)
        self._seed_inputs(forward_batch)
        with self._seed_scope(forward_batch):
            out = runner.eager_runner.execute(forward_batch)
        probs = torch.softmax(out.next_token_logits[:: self.topk], dim=-1)
        return fast_topk(probs, self.topk, dim=-1), out.hidden_states


class ForkMultiLayerEagleDraftWorker(MultiLayerEagleDraftWorker):
    """Per-step MTP heads, each on its own runner and attention backend."""

    def _step_pools(self, forward_batch: ForwardBatch, step: int):
        runner = self.draft_runner_list[step]
        forward_batch.req_to_token_pool = runner.req_to_token_pool
        forward_batch.token_to_kv_pool = runner.token_to_kv_pool
        return runner

    # expect: SG106
    def eager_extend_steps_sealed(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        topk_list = []
        for step in range(self.speculative_num_steps):
            runner = self._step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            out = runner.forward(forward_batch).logits_output
            probs = torch.softmax(out.next_token_logits[select_index], dim=-1)
            topk_list.append(fast_topk(probs, self.topk, dim=-1)[1])
            forward_batch.spec_info.hidden_states = out.hidden_states
        return topk_list

    # expect: clean
    def eager_extend_steps_unmarked(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        topk_list = []
        for step in range(self.speculative_num_steps):
            runner = self._step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                # Pre-plan only to surface planning errors early; unmarked, so
                # each step's forward plans again after DP padding.
                runner.attn_backend.init_forward_metadata(forward_batch)
            out = runner.forward(forward_batch).logits_output
            probs = torch.softmax(out.next_token_logits[select_index], dim=-1)
            topk_list.append(fast_topk(probs, self.topk, dim=-1)[1])
            forward_batch.spec_info.hidden_states = out.hidden_states
        return topk_list

    # expect: clean
    def eager_extend_steps_replan_safe(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> List[torch.Tensor]:
        topk_list = []
        for step in range(self.speculative_num_steps):
            runner = self._step_pools(forward_batch, step)
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                # Same backend object the forward would use: opt into re-plan.
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            out = runner.forward(forward_batch).logits_output
            probs = torch.softmax(out.next_token_logits[select_index], dim=-1)
            topk_list.append(fast_topk(probs, self.topk, dim=-1)[1])
            forward_batch.spec_info.hidden_states = out.hidden_states
        return topk_list

    # expect: SG106
    def eager_extend_first_step_sealed(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> torch.Tensor:
        runner = self._step_pools(forward_batch, 0)
        planners = {
            ForwardMode.DRAFT_EXTEND_V2: runner.attn_backend.init_forward_metadata,
            ForwardMode.DECODE: runner.attn_backend.init_forward_metadata,
        }
        plan_fn = planners.get(forward_batch.forward_mode)
        if plan_fn is not None:
            plan_fn(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        out = runner.forward(forward_batch).logits_output
        probs = torch.softmax(out.next_token_logits[select_index], dim=-1)
        return fast_topk(probs, self.topk, dim=-1)[1]


class ForkEAGLEWorkerV2(EAGLEWorkerV2):
    """Target-verify hooks; the verify forward runs on the target runner."""

    # expect: clean
    def verify_eager_preplanned(self, batch: ScheduleBatch):
        target_runner = self.target_worker.model_runner
        verify_fb, can_run_graph = eagle_prepare_for_verify(
            batch.spec_info,
            self.draft_worker.req_to_token_pool,
            batch,
            self.target_worker,
        )
        if not can_run_graph and not verify_fb.forward_mode.is_idle():
            # Early plan to overlap with the draft tail.  TARGET_VERIFY is
            # always re-planned by the eager extend path from the final batch.
            target_runner.attn_backend.init_forward_metadata(verify_fb)
            verify_fb.mark_forward_metadata_ready()
        return target_runner.forward(verify_fb)

    # expect: clean
    def verify_graph_loaded(self, batch: ScheduleBatch):
        target_runner = self.target_worker.model_runner
        verify_fb, can_run_graph = eagle_prepare_for_verify(
            batch.spec_info,
            self.draft_worker.req_to_token_pool,
            batch,
            self.target_worker,
        )
        if can_run_graph:
            # Graph replay: load_batch wrote the static metadata; the replay
            # pads its own buffers, no MLP-sync padding of the live batch.
            return target_runner.decode_cuda_graph_runner.execute(verify_fb)
        return target_runner.forward(verify_fb)
