"""EAGLE draft worker used by the fork's DP-attention MTP deployments.

Keeps SGLang's ``EagleDraftWorker`` and reshapes only the draft-extend step:
an eager fallback when the extend graph has no bucket, optional pre-planning
on the overlap plan stream, and hooks the serving layer installs at startup.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Callable, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft_extend
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.async_probe import maybe_detect_nan
from sglang.srt.utils.common import fast_topk

from blindsg10.common.gates import fork_flag, mlp_sync_padding_expected
from blindsg10.common.planning import (
    DEFAULT_PLAN_POLICY,
    PlanPolicy,
    apply_plan_policy,
    plan_unmarked,
    preplan,
    preplanned,
)

logger = logging.getLogger(__name__)

_PREPLAN_ENV = "SGLANG_FORK_PREPLAN_DRAFT_EXTEND"


class ForkEagleDraftWorker(EagleDraftWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.plan_policy: PlanPolicy = DEFAULT_PLAN_POLICY
        self._extend_preplan_hook: Optional[Callable[[ForwardBatch], ForwardBatch]] = (
            None
        )
        self._extend_plan_only_hook: Optional[
            Callable[[ForwardBatch], ForwardBatch]
        ] = None
        self.extend_graph_fallbacks = 0

    def install_extend_hooks(self) -> None:
        """Called by the scheduler once attention backends exist."""
        backend = self.draft_runner.attn_backend
        self._extend_preplan_hook = functools.partial(preplan, backend)
        self._extend_plan_only_hook = lambda fb: plan_unmarked(backend, fb)

    @property
    def _extend_metadata_preplanned(self) -> bool:
        # With the overlap plan stream on, draft-extend metadata is built on the
        # plan stream while the target verify is still running.
        return self.plan_stream is not None

    def _gather_selected(self, logits_output, select_index: torch.Tensor):
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        if logits_output.hidden_states is not None:
            logits_output.hidden_states = logits_output.hidden_states[select_index]
        return logits_output

    # expect: SG106
    def _eager_draft_extend(self, forward_batch: ForwardBatch):
        """Eager draft extend for batch sizes the extend graph was not captured for."""
        if forward_batch.forward_mode.is_idle():
            # Idle DP rank: still enter the forward so the collectives line up.
            return self.draft_runner.forward(forward_batch).logits_output
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def _eager_draft_extend_replan_safe(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        # Same backend object the forward path plans with, so a post-pad
        # re-plan is equivalent to this one.
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        # Fork: no plan stream and no DSA seeding on this path; the extend
        # graph is optional (disabled on the long-context pods).
        num_correct_drafts = batch_result.accept_lens - 1
        select_index = (
            torch.arange(
                0,
                len(batch.seq_lens) * self.speculative_num_draft_tokens,
                self.speculative_num_draft_tokens,
                device=self.device,
            )
            + batch_result.accept_lens
            - 1
        )
        next_token_ids = batch_result.next_token_ids.to(torch.int64)
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=num_correct_drafts,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        forward_batch = prepare_for_draft_extend(
            draft_extend_input,
            batch,
            next_token_ids,
            self.speculative_num_draft_tokens,
            self.draft_runner,
            self.cuda_graph_runner_for_draft_extend,
            return_hidden_states_before_norm=False,
            kv_loc_plan=kv_loc_plan,
        )
        graph_runner = self.cuda_graph_runner_for_draft_extend
        if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
            logits_output = graph_runner.execute(forward_batch, select_index)
        else:
            logits_output = self._gather_selected(
                self.draft_runner.forward(forward_batch).logits_output, select_index
            )
        maybe_detect_nan(logits_output.next_token_logits, "fork draft_extend_for_decode")
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = topk_p
        next_draft_input.topk_index = topk_index
        next_draft_input.hidden_states = logits_output.hidden_states

    # expect: SG106
    def _draft_extend_with_graph_fallback(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ):
        graph_runner = self.cuda_graph_runner_for_draft_extend
        try:
            if graph_runner is None:
                raise LookupError("draft extend CUDA graph disabled")
            return graph_runner.execute(forward_batch, select_index)
        except (LookupError, KeyError) as exc:
            # KeyError: no captured bucket for this (bs, num_tokens).
            self.extend_graph_fallbacks += 1
            logger.debug("draft extend falls back to eager: %s", exc)
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            return self._gather_selected(logits_output, select_index)

    # expect: clean
    def _draft_extend_graph_fallback_unplanned(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ):
        graph_runner = self.cuda_graph_runner_for_draft_extend
        try:
            if graph_runner is None:
                raise LookupError("draft extend CUDA graph disabled")
            return graph_runner.execute(forward_batch, select_index)
        except (LookupError, KeyError) as exc:
            self.extend_graph_fallbacks += 1
            logger.debug("draft extend falls back to eager: %s", exc)
            # Planning is left to the forward, which runs it after the DP pad.
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            return self._gather_selected(logits_output, select_index)

    # expect: SG106
    def _draft_extend_under_policy(self, forward_batch: ForwardBatch):
        policy = self.plan_policy
        if self.seed_dsa_topk_from_draft_extend:
            # DSA's indexer cannot rebuild its deep_gemm schedule on a DP-padded
            # batch (#27091): keep the pre-pad plan.
            policy = dataclasses.replace(policy, replan_equivalent=False)
        if not forward_batch.forward_mode.is_idle():
            apply_plan_policy(self.draft_runner.attn_backend, forward_batch, policy)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def _draft_extend_default_policy(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            apply_plan_policy(
                self.draft_runner.attn_backend, forward_batch, self.plan_policy
            )
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def _draft_extend_in_plan_scope(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        with preplanned(
            self.draft_runner.attn_backend, forward_batch, label="draft_extend"
        ):
            output = self.draft_runner.forward(forward_batch)
        return output.logits_output

    # expect: clean
    def _draft_extend_in_replan_safe_scope(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        with preplanned(
            self.draft_runner.attn_backend,
            forward_batch,
            replan_equivalent=True,
            label="draft_extend",
        ):
            output = self.draft_runner.forward(forward_batch)
        return output.logits_output

    # expect: SG106
    def _draft_extend_via_preplan_hook(self, forward_batch: ForwardBatch):
        hook = self._extend_preplan_hook
        if hook is not None and not forward_batch.forward_mode.is_idle():
            hook(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def _draft_extend_via_plan_only_hook(self, forward_batch: ForwardBatch):
        hook = self._extend_plan_only_hook
        if hook is not None and not forward_batch.forward_mode.is_idle():
            # Warms the kv-indices buffers; the forward still owns the plan.
            hook(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def _draft_extend_maybe_preplanned(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        if self._extend_metadata_preplanned:
            with self.plan_stream_ctx:
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def _draft_extend_for_decode_replan(
        self,
        batch: ScheduleBatch,
        draft_extend_input: EagleDraftExtendInput,
        next_token_ids: torch.Tensor,
        select_index: torch.Tensor,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        forward_batch = prepare_for_draft_extend(
            draft_extend_input,
            batch,
            next_token_ids,
            self.speculative_num_draft_tokens,
            self.draft_runner,
            self.cuda_graph_runner_for_draft_extend,
            return_hidden_states_before_norm=False,
            kv_loc_plan=kv_loc_plan,
        )
        graph_runner = self.cuda_graph_runner_for_draft_extend
        if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
            return graph_runner.execute(forward_batch, select_index)
        # prepare_for_draft_extend planned the batch at its real size and marked
        # it; under MLP sync the forward pads it first, so drop the mark and let
        # the forward plan the padded batch.
        forward_batch.forward_metadata_ready = False
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return self._gather_selected(logits_output, select_index)

    # expect: SG106
    def _draft_extend_env_gated(self, forward_batch: ForwardBatch):
        if fork_flag(_PREPLAN_ENV) and not forward_batch.forward_mode.is_idle():
            preplan(self.draft_runner.attn_backend, forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def _draft_extend_env_gated_no_pad(self, forward_batch: ForwardBatch):
        if (
            fork_flag(_PREPLAN_ENV)
            and not mlp_sync_padding_expected()
            and not forward_batch.forward_mode.is_idle()
        ):
            # Only without MLP sync: the batch reaches the forward unpadded.
            preplan(self.draft_runner.attn_backend, forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output
