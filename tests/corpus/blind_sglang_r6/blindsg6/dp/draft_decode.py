"""Fork-local EAGLE draft-decode loops used with --enable-dp-attention."""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import List

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import fast_topk

from blindsg6.dp.helpers import (
    PlanMode,
    pad_for_dp,
    plan_only,
    preplan_batch,
    stamp_global_tokens,
)

logger = logging.getLogger(__name__)


class DPPaddedEagleDraftWorker(EagleDraftWorker):
    """EAGLE draft worker that pads the draft batch for DP attention itself."""

    def _step_logits(self, forward_batch: ForwardBatch, i: int):
        with forward_context(
            ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
            forward_batch=forward_batch,
        ):
            return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_steps_preplanned(self, forward_batch: ForwardBatch) -> List[torch.Tensor]:
        tokens: List[torch.Tensor] = []
        if forward_batch.forward_mode.is_idle():
            return tokens
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        # every DP rank has to present the same token count to the collectives
        forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        for i in range(self.speculative_num_steps - 1):
            logits_output = self._step_logits(forward_batch, i)
            _, topk_index = fast_topk(
                torch.softmax(logits_output.next_token_logits, dim=-1), self.topk, dim=-1
            )
            tokens.append(topk_index)
            forward_batch.input_ids = topk_index.flatten()
            forward_batch.positions.add_(1)
        return tokens

    # expect: clean
    def draft_steps_padded_first(self, forward_batch: ForwardBatch) -> List[torch.Tensor]:
        tokens: List[torch.Tensor] = []
        if forward_batch.forward_mode.is_idle():
            return tokens
        forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        # plan on the padded shapes so the kernels and metadata agree
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        for i in range(self.speculative_num_steps - 1):
            logits_output = self._step_logits(forward_batch, i)
            _, topk_index = fast_topk(
                torch.softmax(logits_output.next_token_logits, dim=-1), self.topk, dim=-1
            )
            tokens.append(topk_index)
            forward_batch.input_ids = topk_index.flatten()
            forward_batch.positions.add_(1)
        return tokens

    # expect: SG106
    def draft_via_helpers(self, forward_batch: ForwardBatch):
        preplan_batch(self.draft_attn_backend, forward_batch)
        forward_batch = pad_for_dp(forward_batch, self.draft_runner)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_via_helpers_replannable(self, forward_batch: ForwardBatch):
        preplan_batch(self.draft_runner.attn_backend, forward_batch, replan_equivalent=True)
        forward_batch = pad_for_dp(forward_batch, self.draft_runner)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_plan_without_mark(self, forward_batch: ForwardBatch):
        # warm the plan early; ModelRunner.forward re-plans post-pad because
        # the batch is not marked
        plan_only(self.draft_runner.attn_backend, forward_batch)
        forward_batch = pad_for_dp(forward_batch, self.draft_runner)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_legacy_skip_flag(self, forward_batch: ForwardBatch, gathered_tokens):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        stamp_global_tokens(forward_batch, gathered_tokens)
        out = self.draft_runner.forward(forward_batch, skip_attn_backend_init=True)
        return out.logits_output

    # expect: clean
    def draft_legacy_skip_flag_local(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        # not DP-synchronised: this rank runs its own shape, nothing pads it
        forward_batch.global_num_tokens_cpu = None
        forward_batch.global_num_tokens_for_logprob_cpu = None
        out = self.draft_runner.forward(forward_batch, skip_attn_backend_init=True)
        return out.logits_output

    # expect: SG106
    def draft_with_partial_runner(self, forward_batch: ForwardBatch):
        run_step = functools.partial(
            self.draft_runner.forward, skip_attn_backend_init=True
        )
        backend = self.draft_runner.attn_backend
        backend.init_forward_metadata(forward_batch)
        forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        outputs = []
        for _ in range(self.speculative_num_steps - 1):
            outputs.append(run_step(forward_batch).logits_output)
        return outputs

    # expect: clean
    def draft_with_partial_runner_planning(self, forward_batch: ForwardBatch):
        run_step = functools.partial(self.draft_runner.forward, pp_proxy_tensors=None)
        backend = self.draft_runner.attn_backend
        backend.init_forward_metadata(forward_batch)
        forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        outputs = []
        for _ in range(self.speculative_num_steps - 1):
            outputs.append(run_step(forward_batch).logits_output)
        return outputs

    # expect: SG106
    def draft_by_mode(self, forward_batch: ForwardBatch, mode: PlanMode):
        if mode is PlanMode.EAGER_PREPLAN:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_by_mode_ordered(self, forward_batch: ForwardBatch, mode: PlanMode):
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        if mode in (PlanMode.EAGER_PREPLAN, PlanMode.POST_PAD_PREPLAN):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_guarded_by_try(self, forward_batch: ForwardBatch):
        try:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        except RuntimeError:
            logger.warning("draft pre-plan failed; forward will plan")
        else:
            forward_batch.mark_forward_metadata_ready()
        forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_guarded_by_try_post_pad(self, forward_batch: ForwardBatch):
        forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        try:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        except RuntimeError:
            logger.warning("draft pre-plan failed; forward will plan")
        else:
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_in_context(self, forward_batch: ForwardBatch):
        backend = self.draft_attn_backend.attn_backends[0]
        with forward_context(
            ForwardContext(attn_backend=backend), forward_batch=forward_batch
        ):
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        with forward_context(
            ForwardContext(attn_backend=backend), forward_batch=forward_batch
        ):
            return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_in_context_replan(self, forward_batch: ForwardBatch):
        backend = self.draft_runner.attn_backend
        with forward_context(
            ForwardContext(attn_backend=backend), forward_batch=forward_batch
        ):
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        with forward_context(
            ForwardContext(attn_backend=backend), forward_batch=forward_batch
        ):
            return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_deprecated_mapper(self, forward_batch: ForwardBatch, legacy_skip: bool = True):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.apply_deprecated_skip_attn_backend_init(True)
        forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_deprecated_mapper_noop(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        # None means "caller expressed no opinion": the batch stays unmarked
        forward_batch.apply_deprecated_skip_attn_backend_init(None)
        forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_leave_plan_to_forward(self, forward_batch: ForwardBatch, gathered_tokens):
        stamp_global_tokens(forward_batch, gathered_tokens)
        ctx = (
            forward_context(
                ForwardContext(attn_backend=self.draft_runner.attn_backend),
                forward_batch=forward_batch,
            )
            if self.draft_runner.attn_backend is not None
            else contextlib.nullcontext()
        )
        with ctx:
            return self.draft_runner.forward(forward_batch).logits_output
