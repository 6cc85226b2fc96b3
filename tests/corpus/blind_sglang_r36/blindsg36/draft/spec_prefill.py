"""Speculative prefill: the draft model runs its own prefill of the prompt
while the target prefills, so the first decode iteration already has draft
tokens.  Under DP attention the draft prefill batch is padded by the draft
runner like any other extend batch.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Dict, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.utils.common import fast_topk, require_mlp_sync

from .config import SPEC_PREFILL_CFG, log_plan


def _draft_prefill_batch(draft_runner, batch: ScheduleBatch, target_hidden: torch.Tensor,
                         next_token_ids: torch.Tensor) -> ForwardBatch:
    """Shifted-by-one prompt for the draft prefill (as _draft_extend_for_prefill)."""
    if not batch.forward_mode.is_idle():
        new_ids = torch.empty_like(batch.input_ids)
        pt = 0
        for i, extend_len in enumerate(batch.extend_lens):
            ids = batch.input_ids[pt : pt + extend_len]
            new_ids[pt : pt + extend_len].copy_(
                torch.cat((ids[1:], next_token_ids[i].reshape(1)))
            )
            pt += extend_len
        batch.input_ids = new_ids
    batch.spec_info = EagleDraftExtendInput(
        hidden_states=target_hidden,
        num_tokens_per_req=1,
        num_tokens_for_logprob_per_req=1,
    )
    fb = ForwardBatch.init_new(
        batch,
        draft_runner,
        capture_hidden_mode=CaptureHiddenMode.LAST,
        return_hidden_states_before_norm=False,
    )
    fb.return_logprob = False
    return fb


class SpecPrefillWorker:
    def __init__(self, draft_worker, target_worker, plan_stream=None):
        self.draft_worker = draft_worker
        self.target_worker = target_worker
        self.draft_runner = draft_worker.draft_runner
        self.topk = draft_worker.topk
        self.plan_stream = plan_stream
        self._staged_fb: Optional[ForwardBatch] = None
        self._staged_probe: Optional[ForwardBatch] = None

    def _plan_ctx(self):
        if self.plan_stream is not None and SPEC_PREFILL_CFG["use_plan_stream"]:
            return torch.cuda.stream(self.plan_stream)
        return torch.cuda.stream(torch.cuda.current_stream())

    def _sample(self, logits_output):
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        return fast_topk(probs, self.topk, dim=-1)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill
    # expect: SG106
    def draft_during_prefill(self, batch: ScheduleBatch, target_hidden: torch.Tensor,
                             next_token_ids: torch.Tensor):
        fb = _draft_prefill_batch(self.draft_runner, batch, target_hidden, next_token_ids)
        if not fb.forward_mode.is_idle():
            # The target prefill is still running; plan the draft prefill now
            # so the draft forward starts immediately after.
            self.draft_runner.attn_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(fb).logits_output
        return self._sample(logits_output), logits_output.hidden_states

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill
    # expect: clean
    def draft_during_prefill_alt(self, batch: ScheduleBatch, target_hidden: torch.Tensor,
                                  next_token_ids: torch.Tensor):
        fb = _draft_prefill_batch(self.draft_runner, batch, target_hidden, next_token_ids)
        if not fb.forward_mode.is_idle() and fb.global_num_tokens_cpu is None:
            # No MLP sync for this batch: the runner will not pad it, so the
            # early plan is the plan it runs with.
            self.draft_runner.attn_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(fb).logits_output
        return self._sample(logits_output), logits_output.hidden_states

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (plan_stream_ctx)
    # expect: SG106
    def _run_prefill_draft_async_v2(self, batch: ScheduleBatch, target_hidden: torch.Tensor,
                                 next_token_ids: torch.Tensor, cfg: Optional[Dict] = None):
        cfg = cfg or SPEC_PREFILL_CFG
        fb = _draft_prefill_batch(self.draft_runner, batch, target_hidden, next_token_ids)
        if cfg["overlap_plan"] and not fb.forward_mode.is_idle():
            if self.plan_stream is not None:
                self.plan_stream.wait_stream(torch.cuda.current_stream())
            with self._plan_ctx():
                self.draft_runner.attn_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()
            if self.plan_stream is not None:
                torch.cuda.current_stream().wait_stream(self.plan_stream)
        logits_output = self.draft_runner.forward(fb).logits_output
        return self._sample(logits_output)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (plan_stream_ctx)
    # expect: clean
    def _run_prefill_draft_async(self, batch: ScheduleBatch, target_hidden: torch.Tensor,
                                         next_token_ids: torch.Tensor, cfg: Optional[Dict] = None):
        cfg = cfg or SPEC_PREFILL_CFG
        fb = _draft_prefill_batch(self.draft_runner, batch, target_hidden, next_token_ids)
        if cfg["overlap_plan"] and not require_mlp_sync() and not fb.forward_mode.is_idle():
            if self.plan_stream is not None:
                self.plan_stream.wait_stream(torch.cuda.current_stream())
            with self._plan_ctx():
                self.draft_runner.attn_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()
            if self.plan_stream is not None:
                torch.cuda.current_stream().wait_stream(self.plan_stream)
        logits_output = self.draft_runner.forward(fb).logits_output
        return self._sample(logits_output)

    # idiom: sglang/srt/model_executor/forward_batch_info.py ForwardBatch.apply_deprecated_skip_attn_backend_init
    # expect: SG106
    def prefill_then_draft_legacy_b(self, batch: ScheduleBatch, target_hidden: torch.Tensor,
                                            next_token_ids: torch.Tensor):
        fb = _draft_prefill_batch(self.draft_runner, batch, target_hidden, next_token_ids)
        skip = not fb.forward_mode.is_idle()
        if skip:
            self.draft_runner.attn_backend.init_forward_metadata(fb)
        # Older experiments passed skip_attn_backend_init=True to forward();
        # keep their semantics explicitly.
        fb.apply_deprecated_skip_attn_backend_init(skip)
        logits_output = self.draft_runner.forward(fb).logits_output
        return self._sample(logits_output)

    # idiom: sglang/srt/model_executor/forward_batch_info.py ForwardBatch.apply_deprecated_skip_attn_backend_init
    # expect: clean
    def prefill_then_draft_legacy(self, batch: ScheduleBatch,
                                                 target_hidden: torch.Tensor,
                                                 next_token_ids: torch.Tensor):
        fb = _draft_prefill_batch(self.draft_runner, batch, target_hidden, next_token_ids)
        skip = not fb.forward_mode.is_idle() and fb.global_num_tokens_cpu is None
        if skip:
            self.draft_runner.attn_backend.init_forward_metadata(fb)
        fb.apply_deprecated_skip_attn_backend_init(skip)
        logits_output = self.draft_runner.forward(fb).logits_output
        return self._sample(logits_output)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill (staged across ticks)
    # expect: SG106
    def stage_draft_batch(self, batch: ScheduleBatch, target_hidden: torch.Tensor,
                          next_token_ids: torch.Tensor) -> None:
        fb = _draft_prefill_batch(self.draft_runner, batch, target_hidden, next_token_ids)
        if not fb.forward_mode.is_idle():
            with self._plan_ctx():
                self.draft_runner.attn_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()
        self._staged_fb = fb

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill (staged across ticks)
    # expect: clean
    def stage_draft_batch_probe(self, batch: ScheduleBatch, target_hidden: torch.Tensor,
                                next_token_ids: torch.Tensor) -> None:
        fb = _draft_prefill_batch(self.draft_runner, batch, target_hidden, next_token_ids)
        if not fb.forward_mode.is_idle():
            # Size the backend's workspace on a shallow probe; the staged
            # batch itself stays unmarked and is planned by the runner.
            probe = copy.copy(fb)
            with self._plan_ctx():
                self.draft_runner.attn_backend.init_forward_metadata(probe)
            probe.mark_forward_metadata_ready()
            self._staged_probe = probe
        self._staged_fb = fb

    def launch_staged(self):
        fb, self._staged_fb = self._staged_fb, None
        if fb is None:
            return None
        logits_output = self.draft_runner.forward(fb).logits_output
        log_plan("spec_prefill_staged", fb)
        return self._sample(logits_output)


# idiom: sglang/srt/model_executor/forward_batch_info.py ForwardBatch.mark_forward_metadata_ready (fields set by hand)
# expect: SG106
def speculative_prefill_step_v2(
    draft_runner,
    batch: ScheduleBatch,
    target_hidden: torch.Tensor,
    next_token_ids: torch.Tensor,
    *,
    num_lookahead: int = 0,
    topk: int = 1,
    preplan: bool = True,
    capture_last: bool = True,
    temperature: float = 1.0,
):
    fb = _draft_prefill_batch(draft_runner, batch, target_hidden, next_token_ids)
    if not capture_last:
        fb.capture_hidden_mode = CaptureHiddenMode.NULL
    if preplan and not fb.forward_mode.is_idle():
        draft_runner.attn_backend.init_forward_metadata(fb)
        fb.forward_metadata_ready = True
    logits_output = draft_runner.forward(fb).logits_output
    logits = logits_output.next_token_logits / max(temperature, 1e-5)
    topk_p, topk_index = fast_topk(torch.softmax(logits, dim=-1), topk, dim=-1)
    return topk_p, topk_index, logits_output.hidden_states, num_lookahead


# idiom: sglang/srt/model_executor/forward_batch_info.py ForwardBatch.mark_forward_metadata_ready (fields set by hand)
# expect: clean
def speculative_prefill_step(
    draft_runner,
    batch: ScheduleBatch,
    target_hidden: torch.Tensor,
    next_token_ids: torch.Tensor,
    *,
    num_lookahead: int = 0,
    topk: int = 1,
    preplan: bool = True,
    capture_last: bool = True,
    temperature: float = 1.0,
):
    fb = _draft_prefill_batch(draft_runner, batch, target_hidden, next_token_ids)
    if not capture_last:
        fb.capture_hidden_mode = CaptureHiddenMode.NULL
    if preplan and not fb.forward_mode.is_idle():
        draft_runner.attn_backend.init_forward_metadata(fb)
        # Hand-rolled mark_forward_metadata_ready(replan_equivalent=True):
        # records the plan shapes so the runner re-plans a padded batch.
        fb.forward_metadata_ready = True
        fb.forward_metadata_planned_bs = fb.batch_size
        fb.forward_metadata_planned_num_tokens = (
            fb.input_ids.shape[0] if fb.input_ids is not None else 0
        )
        fb.forward_metadata_replan_equivalent = True
    logits_output = draft_runner.forward(fb).logits_output
    logits = logits_output.next_token_logits / max(temperature, 1e-5)
    topk_p, topk_index = fast_topk(torch.softmax(logits, dim=-1), topk, dim=-1)
    return topk_p, topk_index, logits_output.hidden_states, num_lookahead
