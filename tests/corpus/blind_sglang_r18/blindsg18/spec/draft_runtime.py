"""Runtime glue for the fork's draft workers: graph-runner fallbacks,
frozen-KV seeding, micro-batch splitting and a few worker flavours that
decide up front whether to pre-plan the draft-extend batch."""

from __future__ import annotations

import logging
from typing import List, Optional, Sequence

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import (
    ForwardContext,
    forward_context,
    get_attn_backend,
)
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.eagle_draft_cuda_graph_runner import (
    EAGLEDraftCudaGraphRunner,
)
from sglang.srt.speculative.eagle_utils import per_step_draft_out_cache_loc
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.utils.common import fast_topk

from blindsg18.common.dp_padding import pad_batch_for_dp, plan_and_mark_replannable

logger = logging.getLogger(__name__)


class FrozenKVSeedDraftWorker(FrozenKVMTPDraftWorker):
    """Frozen-KV MTP worker whose seed forward is split out so the overlap
    scheduler can issue it before the recurrent steps."""

    # expect: SG106
    def seed_forward(self, forward_batch: ForwardBatch):
        if forward_batch.needs_forward_metadata_init():
            # One plan covers the seed and every recurrent iter (same rope
            # position); _init_frozen_kv_metadata marks the batch.
            self._init_frozen_kv_metadata(forward_batch)
        spec_info = forward_batch.spec_info
        forward_batch.input_ids = spec_info.bonus_tokens
        self._set_positions(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_model_runner.forward(forward_batch).logits_output
        probs = torch.softmax(seed_output.next_token_logits, dim=-1)
        return fast_topk(probs, self.topk, dim=-1), seed_output.hidden_states

    # expect: clean
    def seed_forward_padded(self, forward_batch: ForwardBatch):
        # Apply the MLP-sync padding before the frozen-KV plan, so the plan's
        # rows are the rows the seed forward runs.
        pad_batch_for_dp(forward_batch, self.draft_model_runner)
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        spec_info = forward_batch.spec_info
        forward_batch.input_ids = spec_info.bonus_tokens
        self._set_positions(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            seed_output = self.draft_model_runner.forward(forward_batch).logits_output
        probs = torch.softmax(seed_output.next_token_logits, dim=-1)
        return fast_topk(probs, self.topk, dim=-1), seed_output.hidden_states


class EagerFallbackDraftGraphRunner(EAGLEDraftCudaGraphRunner):
    """Draft graph runner that degrades to the eager loop for batch sizes
    above the largest captured bucket instead of failing can_run_graph."""

    # expect: SG106
    def execute(self, forward_batch: ForwardBatch):
        if forward_batch.batch_size <= max(self.capture_bs):
            return super().execute(forward_batch)
        logger.debug(
            "draft bs=%d above captured max %d; eager fallback",
            forward_batch.batch_size,
            max(self.capture_bs),
        )
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.eagle_worker.draft_forward(forward_batch)


class SingleRankFallbackDraftGraphRunner(EAGLEDraftCudaGraphRunner):
    """Same fallback, restricted to batches the runner will not pad."""

    # expect: clean
    def execute(self, forward_batch: ForwardBatch):
        if forward_batch.batch_size <= max(self.capture_bs):
            return super().execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            raise RuntimeError(
                f"draft bs={forward_batch.batch_size} exceeds the captured "
                f"buckets (max {max(self.capture_bs)}) under MLP sync; the eager "
                "fallback would plan before the DP padding. Raise "
                "--cuda-graph-max-bs."
            )
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.eagle_worker.draft_forward(forward_batch)


# expect: SG106
def run_split_draft_extend(
    draft_runner: ModelRunner, micro_batches: Sequence[ForwardBatch]
) -> List[torch.Tensor]:
    """Two micro-batches: plan both up front (the plans overlap the first
    micro-batch's MoE all-to-all), then run them in order."""
    backend = draft_runner.attn_backend
    for fb in micro_batches:
        if not fb.forward_mode.is_idle():
            backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()
    outputs = []
    for fb in micro_batches:
        outputs.append(draft_runner.forward(fb).logits_output.next_token_logits)
    return outputs


# expect: clean
def run_split_draft_extend_replannable(
    draft_runner: ModelRunner, micro_batches: Sequence[ForwardBatch]
) -> List[torch.Tensor]:
    backend = draft_runner.attn_backend
    for fb in micro_batches:
        if not fb.forward_mode.is_idle():
            plan_and_mark_replannable(backend, fb)
    outputs = []
    for fb in micro_batches:
        outputs.append(draft_runner.forward(fb).logits_output.next_token_logits)
    return outputs


# expect: SG106
def plan_in_context_then_forward(
    draft_runner: ModelRunner, backend, forward_batch: ForwardBatch
):
    """Plan through the ambient forward context so backends that read the
    pools from it (hybrid SWA, frozen-KV views) see the same ones."""
    with forward_context(ForwardContext(attn_backend=backend), forward_batch=forward_batch):
        if not forward_batch.forward_mode.is_idle():
            get_attn_backend().init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return draft_runner.forward(forward_batch).logits_output


# expect: clean
def plan_in_context_after_padding(
    draft_runner: ModelRunner, backend, forward_batch: ForwardBatch
):
    with forward_context(ForwardContext(attn_backend=backend), forward_batch=forward_batch):
        pad_batch_for_dp(forward_batch, draft_runner)
        if not forward_batch.forward_mode.is_idle():
            get_attn_backend().init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return draft_runner.forward(forward_batch).logits_output


class DpGatedPreplanWorker(EagleDraftWorker):
    def __init__(
        self,
        server_args: ServerArgs,
        gpu_id: int,
        nccl_port: int,
        target_worker,
        preplan_extend: bool = True,
    ):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        # The runner pads draft batches under DP attention; a pre-plan would
        # then describe the unpadded batch.
        self._preplan_extend = preplan_extend and not server_args.enable_dp_attention

    # expect: clean
    def draft_extend_flagged(self, forward_batch: ForwardBatch):
        if self._preplan_extend and not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output


class OverlapPreplanWorker(EagleDraftWorker):
    def __init__(
        self,
        server_args: ServerArgs,
        gpu_id: int,
        nccl_port: int,
        target_worker,
        preplan_extend: bool = False,
    ):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        # DP attention leaves the draft GPU idle while the ranks sync their
        # token counts: always pre-plan there to hide the plan.
        self._preplan_extend = preplan_extend or server_args.enable_dp_attention

    # expect: SG106
    def draft_extend_flagged(self, forward_batch: ForwardBatch):
        if self._preplan_extend and not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    def _sync_dp(self, forward_batch: ForwardBatch) -> None:
        """Pad now so the gathered hidden-state buffer can be allocated on the
        plan stream."""
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self.draft_runner)

    # expect: SG106
    def draft_extend_sized(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        with self.plan_stream_ctx:
            self._sync_dp(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_sized_first(self, forward_batch: ForwardBatch):
        with self.plan_stream_ctx:
            self._sync_dp(forward_batch)
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            torch.cuda.current_stream().wait_stream(self.plan_stream)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_via_runner_backend(self, forward_batch: ForwardBatch):
        """Chain (topk=1) draft decode steps planned on the multi-step backend
        the worker hung off its runner (``draft_runner.draft_attn_backend``)."""
        multi_step = self.draft_runner.draft_attn_backend
        if not forward_batch.forward_mode.is_idle():
            multi_step.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        spec_info = forward_batch.spec_info
        hidden_states = spec_info.hidden_states
        topk_index = spec_info.topk_index
        out_cache_loc = per_step_draft_out_cache_loc(
            forward_batch.out_cache_loc,
            forward_batch.batch_size,
            1,
            self.speculative_num_steps,
        )
        token_steps = [topk_index]
        for i in range(self.speculative_num_steps - 1):
            forward_batch.input_ids = topk_index.flatten()
            forward_batch.out_cache_loc = out_cache_loc[i]
            spec_info.hidden_states = hidden_states
            with forward_context(
                ForwardContext(attn_backend=multi_step.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            topk_index = torch.argmax(
                logits_output.next_token_logits, dim=-1, keepdim=True
            )
            token_steps.append(topk_index)
            hidden_states = logits_output.hidden_states
            forward_batch.positions.add_(1)
        return torch.cat(token_steps, dim=1)

    # expect: SG106
    def draft_extend_with_closure(self, forward_batch: ForwardBatch):
        backend = self.draft_runner.attn_backend

        def _plan_now() -> None:
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()

        if not forward_batch.forward_mode.is_idle():
            if self.plan_stream is not None:
                with self.plan_stream_ctx:
                    _plan_now()
                torch.cuda.current_stream().wait_stream(self.plan_stream)
            else:
                _plan_now()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_checked(self, forward_batch: ForwardBatch):
        """Explicit two-phase forward: pad, plan only if the batch still needs
        it, then run."""
        pad_batch_for_dp(forward_batch, self.draft_runner)
        if forward_batch.needs_forward_metadata_init() and not (
            forward_batch.forward_mode.is_idle()
        ):
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output
