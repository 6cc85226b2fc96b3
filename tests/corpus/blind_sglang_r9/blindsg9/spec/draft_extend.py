"""Eager draft-extend paths for the fork's EAGLE / standalone draft workers.

These workers rebuild the draft-extend ForwardBatch themselves (no plan
stream), because the fork feeds the draft model a different hidden-state
layout than upstream's prepare_for_draft_extend expects.
"""

from __future__ import annotations

import functools
import logging
from typing import Optional

import torch

from sglang.srt.environ import envs
from sglang.srt.layers.dp_attention import is_dp_attention_enabled
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.runtime_context import get_parallel, get_spec
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker

from blindsg9.common.planning import (
    preplan_allowed,
    preplan_allowed_by_env,
    preplan_and_mark,
    preplan_replannable,
)

logger = logging.getLogger(__name__)


def _select_last_accepted(
    accept_lens: torch.Tensor, num_draft_tokens: int, device
) -> torch.Tensor:
    bs = accept_lens.shape[0]
    return (
        torch.arange(0, bs * num_draft_tokens, num_draft_tokens, device=device)
        + accept_lens
        - 1
    )


class _DraftExtendBatchMixin:
    """Builds the eager draft-extend ForwardBatch (fork layout)."""

    def _build_draft_extend_batch(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ) -> ForwardBatch:
        num_draft_tokens = self.speculative_num_draft_tokens
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=num_draft_tokens,
            num_tokens_for_logprob_per_req=num_draft_tokens,
        )
        batch.input_ids = batch_result.next_token_ids.to(torch.int64)
        bs = len(batch.seq_lens)
        batch.prefix_lens = [int(x) for x in batch.seq_lens_cpu.tolist()]
        batch.extend_lens = [num_draft_tokens] * bs
        batch.extend_num_tokens = bs * num_draft_tokens
        batch.forward_mode = (
            ForwardMode.IDLE
            if batch.forward_mode.is_idle()
            else ForwardMode.DRAFT_EXTEND_V2
        )
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
            kv_loc_plan=kv_loc_plan,
        )
        forward_batch.seq_lens = forward_batch.seq_lens + num_draft_tokens
        forward_batch.seq_lens_cpu = forward_batch.seq_lens_cpu + num_draft_tokens
        forward_batch.seq_lens_sum = int(forward_batch.seq_lens_cpu.sum())
        return forward_batch

    def _finish_draft_extend(self, batch_result, logits_output, select_index):
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        if logits_output.hidden_states is not None:
            logits_output.hidden_states = logits_output.hidden_states[select_index]
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = torch.topk(probs, self.topk, dim=-1)
        nxt = batch_result.next_draft_input
        nxt.topk_p, nxt.topk_index, nxt.hidden_states = (
            topk_p,
            topk_index,
            logits_output.hidden_states,
        )


class ForkEagleDraftWorker(_DraftExtendBatchMixin, EagleDraftWorker):
    """EAGLE draft worker of the fork: eager draft extend, pre-planned."""

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        forward_batch = self._build_draft_extend_batch(batch, batch_result, kv_loc_plan)
        select_index = _select_last_accepted(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        can_run_graph = bool(
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_run_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            if not forward_batch.forward_mode.is_idle():
                # Plan once here so the per-layer hot path never re-plans.
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    # expect: SG106
    def _draft_extend_eager_kwargs(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
    ):
        """Old-style (0.5.6) call: skip the runner's init via the forward kwarg."""
        forward_batch = self._build_draft_extend_batch(batch, batch_result)
        fwd_kwargs = {"skip_attn_backend_init": True}
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        out = self.draft_runner.forward(forward_batch, **fwd_kwargs)
        select_index = _select_last_accepted(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        self._finish_draft_extend(batch_result, out.logits_output, select_index)

    # expect: SG106
    def _run_planned_draft_extend(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
    ):
        forward_batch = self._build_draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            forward_batch = preplan_and_mark(
                self.draft_runner.attn_backend, forward_batch
            )
        out = self.draft_runner.forward(forward_batch)
        select_index = _select_last_accepted(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        self._finish_draft_extend(batch_result, out.logits_output, select_index)

    @property
    def _skip_post_pad_replan(self) -> bool:
        # Multi-step drafts already paid for a plan; reuse it.
        return get_spec().speculative_num_steps > 1

    # expect: SG106
    def _draft_extend_property_gate(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
    ):
        forward_batch = self._build_draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            if self._skip_post_pad_replan:
                forward_batch.mark_forward_metadata_ready()
        out = self.draft_runner.forward(forward_batch)
        select_index = _select_last_accepted(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        self._finish_draft_extend(batch_result, out.logits_output, select_index)

    # expect: SG106
    def _draft_extend_env_gate(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
    ):
        forward_batch = self._build_draft_extend_batch(batch, batch_result)
        if preplan_allowed_by_env() and not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        out = self.draft_runner.forward(forward_batch)
        select_index = _select_last_accepted(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        self._finish_draft_extend(batch_result, out.logits_output, select_index)

    # expect: SG106
    def _draft_extend_dispatch(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
    ):
        forward_batch = self._build_draft_extend_batch(batch, batch_result)
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        runner = self.cuda_graph_runner_for_draft_extend
        if runner is not None and runner.can_run_graph(forward_batch):
            select_index = _select_last_accepted(
                batch_result.accept_lens,
                self.speculative_num_draft_tokens,
                self.device,
            )
            return runner.execute(forward_batch, select_index)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def _draft_extend_try_preplan(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
    ):
        forward_batch = self._build_draft_extend_batch(batch, batch_result)
        backend = self.draft_runner.attn_backend
        try:
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        except (RuntimeError, AssertionError) as e:
            # Some backends refuse an idle-padded window; let the runner plan.
            logger.warning("draft-extend pre-plan failed, deferring: %s", e)
        out = self.draft_runner.forward(forward_batch)
        select_index = _select_last_accepted(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        self._finish_draft_extend(batch_result, out.logits_output, select_index)


class DPSafeEagleDraftWorker(_DraftExtendBatchMixin, EagleDraftWorker):
    """Same worker, with the pre-plan kept away from DP-attention padding."""

    def __init__(self, server_args: ServerArgs, *args, **kwargs):
        super().__init__(server_args, *args, **kwargs)
        self._preplan_draft_extend = not server_args.enable_dp_attention

    # expect: clean
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        forward_batch = self._build_draft_extend_batch(batch, batch_result, kv_loc_plan)
        select_index = _select_last_accepted(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        can_run_graph = bool(
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_run_graph:
            logits_output = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            if not forward_batch.forward_mode.is_idle() and not is_dp_attention_enabled():
                # Without DP attention nothing pads the batch after this plan.
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    # expect: clean
    def _draft_extend_eager_kwargs(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
    ):
        forward_batch = self._build_draft_extend_batch(batch, batch_result)
        # Only skip the runner's own init when it cannot pad the batch.
        fwd_kwargs = {"skip_attn_backend_init": not is_dp_attention_enabled()}
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        out = self.draft_runner.forward(forward_batch, **fwd_kwargs)
        select_index = _select_last_accepted(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        self._finish_draft_extend(batch_result, out.logits_output, select_index)

    # expect: clean
    def _run_planned_draft_extend(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
    ):
        forward_batch = self._build_draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            forward_batch = preplan_replannable(
                self.draft_runner.attn_backend, forward_batch
            )
        out = self.draft_runner.forward(forward_batch)
        select_index = _select_last_accepted(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        self._finish_draft_extend(batch_result, out.logits_output, select_index)

    @property
    def _skip_post_pad_replan(self) -> bool:
        # Reusing the pre-plan is only sound when no DP padding follows.
        return get_parallel().attn_dp_size == 1

    # expect: clean
    def _draft_extend_property_gate(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
    ):
        forward_batch = self._build_draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            if self._skip_post_pad_replan:
                forward_batch.mark_forward_metadata_ready()
        out = self.draft_runner.forward(forward_batch)
        select_index = _select_last_accepted(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        self._finish_draft_extend(batch_result, out.logits_output, select_index)

    # expect: clean
    def _draft_extend_env_gate(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
    ):
        forward_batch = self._build_draft_extend_batch(batch, batch_result)
        if preplan_allowed() and not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        out = self.draft_runner.forward(forward_batch)
        select_index = _select_last_accepted(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        self._finish_draft_extend(batch_result, out.logits_output, select_index)

    # expect: clean
    def _draft_extend_dispatch(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
    ):
        forward_batch = self._build_draft_extend_batch(batch, batch_result)
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        runner = self.cuda_graph_runner_for_draft_extend
        if runner is not None and runner.can_run_graph(forward_batch):
            select_index = _select_last_accepted(
                batch_result.accept_lens,
                self.speculative_num_draft_tokens,
                self.device,
            )
            return runner.execute(forward_batch, select_index)
        if forward_batch.global_num_tokens_cpu is None:
            # No MLP sync this step: the runner will not pad, keep the plan.
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            return self.draft_runner.forward(forward_batch).logits_output
        # DP-synced step: let the runner plan after it pads.
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def _draft_extend_flag_gate(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
    ):
        forward_batch = self._build_draft_extend_batch(batch, batch_result)
        if self._preplan_draft_extend and not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        out = self.draft_runner.forward(forward_batch)
        select_index = _select_last_accepted(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        self._finish_draft_extend(batch_result, out.logits_output, select_index)

    # expect: clean
    def _draft_extend_try_preplan(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
    ):
        forward_batch = self._build_draft_extend_batch(batch, batch_result)
        backend = self.draft_runner.attn_backend
        try:
            backend.init_forward_metadata(forward_batch)
        except (RuntimeError, AssertionError) as e:
            logger.warning("draft-extend pre-plan failed, deferring: %s", e)
        else:
            # Same backend as the runner's: a post-pad re-plan is equivalent.
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        out = self.draft_runner.forward(forward_batch)
        select_index = _select_last_accepted(
            batch_result.accept_lens, self.speculative_num_draft_tokens, self.device
        )
        self._finish_draft_extend(batch_result, out.logits_output, select_index)


class ForkStandaloneDraftWorker(_DraftExtendBatchMixin, StandaloneDraftWorker):
    """Standalone (small dense draft model) worker with a bound planner."""

    # expect: SG106
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        batch.input_ids = torch.cat(
            [batch.input_ids[1:], next_token_ids[-1:]]
        ).contiguous()
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            return_hidden_states_before_norm=False,
            kv_loc_plan=kv_loc_plan,
        )
        plan = functools.partial(
            self.draft_runner.attn_backend.init_forward_metadata, forward_batch
        )
        mark_ready = forward_batch.mark_forward_metadata_ready
        if not forward_batch.forward_mode.is_idle():
            plan()
            mark_ready()
        return self.draft_runner.forward(forward_batch).logits_output


class DPSafeStandaloneDraftWorker(_DraftExtendBatchMixin, StandaloneDraftWorker):
    # expect: clean
    def _draft_extend_for_prefill(
        self,
        batch: ScheduleBatch,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        mm_input_embeds: Optional[torch.Tensor] = None,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        batch.input_ids = torch.cat(
            [batch.input_ids[1:], next_token_ids[-1:]]
        ).contiguous()
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            return_hidden_states_before_norm=False,
            kv_loc_plan=kv_loc_plan,
        )
        plan = functools.partial(
            self.draft_runner.attn_backend.init_forward_metadata, forward_batch
        )
        # Same backend object as the runner's, so a post-pad re-plan is
        # equivalent: let the runner re-plan if DP padding reshapes the batch.
        mark_ready = functools.partial(
            forward_batch.mark_forward_metadata_ready, replan_equivalent=True
        )
        if not forward_batch.forward_mode.is_idle():
            plan()
            mark_ready()
        return self.draft_runner.forward(forward_batch).logits_output
