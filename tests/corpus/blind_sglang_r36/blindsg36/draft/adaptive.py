"""Adaptive speculative step counts chosen at runtime (per batch size), with
DP attention.  Builds on AdaptiveSpeculativeParams; the step count picks the
number of draft forwards, and the draft-extend width follows it.
"""

from __future__ import annotations

import functools
from typing import Callable, Dict, List, Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAMultiStepDraftBackend,
)
from sglang.srt.layers.attention.triton_backend import TritonMultiStepDraftBackend
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams
from sglang.srt.speculative.eagle_info import (
    EagleDraftExtendInput,
    EagleDraftInput,
    EagleVerifyInput,
)
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.common import fast_topk

from .config import ADAPTIVE_CFG, log_plan


def _steps_loop(worker, forward_batch: ForwardBatch, steps: int):
    spec_info: EagleDraftInput = forward_batch.spec_info
    topk_p, topk_index, hidden = spec_info.topk_p, spec_info.topk_index, spec_info.hidden_states
    scores, tokens = None, []
    for i in range(steps):
        input_ids, hidden, scores, tree_info = select_top_k_tokens(
            i, topk_p, topk_index, hidden, scores, worker.topk
        )
        tokens.append(tree_info[1])
        if i == steps - 1:
            break
        forward_batch.input_ids = input_ids
        spec_info.hidden_states = hidden
        with forward_context(
            ForwardContext(attn_backend=worker.draft_attn_backend.attn_backends[i]),
            forward_batch=forward_batch,
        ):
            out = worker.draft_runner.forward(forward_batch).logits_output
        topk_p, topk_index = fast_topk(torch.softmax(out.next_token_logits, -1), worker.topk, dim=-1)
        hidden = out.hidden_states
        forward_batch.positions.add_(1)
    return torch.cat(tokens, dim=1)


def _draft_extend_fb(worker, batch: ScheduleBatch, hidden, accept_lens, width: int):
    batch.spec_info = EagleDraftExtendInput(
        hidden_states=hidden,
        num_correct_drafts=accept_lens - 1,
        num_accept_tokens=accept_lens,
        num_tokens_per_req=width,
        num_tokens_for_logprob_per_req=width,
    )
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DRAFT_EXTEND_V2
    )
    return ForwardBatch.init_new(
        batch,
        worker.draft_runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_hidden_states_before_norm=False,
    )


class AdaptiveEagleWorker:
    def __init__(self, draft_worker, target_worker, adaptive_params: AdaptiveSpeculativeParams):
        self.w = draft_worker
        self.target_worker = target_worker
        self.adaptive_params = adaptive_params
        self.topk = draft_worker.topk
        self.draft_runner = draft_worker.draft_runner
        self.draft_attn_backend = draft_worker.draft_attn_backend
        self.cuda_graph_runner = draft_worker.cuda_graph_runner

    def _pick_steps(self, batch: ScheduleBatch) -> int:
        steps = self.adaptive_params.get_steps_for_batch(batch.batch_size())
        return max(1, min(steps, max(ADAPTIVE_CFG["candidate_steps"])))

    def _plan_draft_extend(self, fb: ForwardBatch) -> bool:
        if fb.forward_mode.is_idle():
            return False
        self.draft_runner.attn_backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()
        return True

    def _plan_draft_extend_alt(self, fb: ForwardBatch) -> bool:
        if fb.forward_mode.is_idle() or fb.global_num_tokens_cpu is not None:
            return False
        self.draft_runner.attn_backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()
        return True

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (adaptive step count)
    # expect: SG106
    def draft_adaptive(self, batch: ScheduleBatch):
        steps = self._pick_steps(batch)
        fb, can_run_graph, _ = prepare_for_draft(
            batch.spec_info, self.w.req_to_token_pool, batch, self.cuda_graph_runner,
            self.draft_runner, self.topk, steps,
        )
        if can_run_graph:
            return self.cuda_graph_runner.execute(fb)
        if steps > 1 and not fb.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()
            log_plan(f"adaptive{steps}", fb)
        return _steps_loop(self, fb, steps)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (adaptive step count)
    # expect: clean
    def draft_adaptive_b(self, batch: ScheduleBatch):
        steps = self._pick_steps(batch)
        fb, can_run_graph, _ = prepare_for_draft(
            batch.spec_info, self.w.req_to_token_pool, batch, self.cuda_graph_runner,
            self.draft_runner, self.topk, steps,
        )
        if can_run_graph:
            return self.cuda_graph_runner.execute(fb)
        if steps > 1 and not fb.forward_mode.is_idle():
            if fb.global_num_tokens_cpu is not None:
                raise NotImplementedError(
                    f"adaptive draft with {steps} steps needs the draft cuda graph "
                    "under DP attention (eager multi-step plans cannot survive "
                    "MLP-sync padding)"
                )
            self.draft_attn_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()
        return _steps_loop(self, fb, steps)

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend / run_eagle_verify (isinstance dispatch)
    # expect: SG106
    def preplan_by_input_type_v2(self, fb: ForwardBatch, model_runner):
        if fb.forward_mode.is_idle():
            return model_runner.forward(fb)
        spec_info = fb.spec_info
        if isinstance(spec_info, EagleVerifyInput):
            graph = model_runner.decode_cuda_graph_runner
            if graph is not None and graph.can_run_graph(fb):
                graph.load_batch(fb)
            else:
                model_runner.attn_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()
        elif isinstance(spec_info, EagleDraftExtendInput):
            model_runner.attn_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()
        return model_runner.forward(fb)

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend / run_eagle_verify (isinstance dispatch)
    # expect: clean
    def preplan_by_input_type(self, fb: ForwardBatch, model_runner):
        if fb.forward_mode.is_idle():
            return model_runner.forward(fb)
        spec_info = fb.spec_info
        if isinstance(spec_info, EagleVerifyInput):
            graph = model_runner.decode_cuda_graph_runner
            if graph is not None and graph.can_run_graph(fb):
                graph.load_batch(fb)
            else:
                # Eager TARGET_VERIFY is re-planned after padding regardless.
                model_runner.attn_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()
        elif isinstance(spec_info, EagleDraftExtendInput):
            # Draft extend: leave it to the runner, which plans after the
            # MLP-sync padding.
            pass
        return model_runner.forward(fb)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: SG106
    def draft_extend_adaptive(self, batch: ScheduleBatch, hidden: torch.Tensor,
                              accept_lens: torch.Tensor):
        steps = self._pick_steps(batch)
        width = steps + 1
        fb = _draft_extend_fb(self, batch, hidden, accept_lens, width)
        planned = self._plan_draft_extend(fb)
        out = self.draft_runner.forward(fb).logits_output
        select_index = torch.arange(len(accept_lens), device=accept_lens.device) * width + accept_lens - 1
        out.next_token_logits = out.next_token_logits[select_index]
        return fast_topk(torch.softmax(out.next_token_logits, -1), self.topk, dim=-1), planned

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: clean
    def draft_extend_adaptive_alt(self, batch: ScheduleBatch, hidden: torch.Tensor,
                                      accept_lens: torch.Tensor):
        steps = self._pick_steps(batch)
        width = steps + 1
        fb = _draft_extend_fb(self, batch, hidden, accept_lens, width)
        planned = self._plan_draft_extend_alt(fb)
        out = self.draft_runner.forward(fb).logits_output
        select_index = torch.arange(len(accept_lens), device=accept_lens.device) * width + accept_lens - 1
        out.next_token_logits = out.next_token_logits[select_index]
        return fast_topk(torch.softmax(out.next_token_logits, -1), self.topk, dim=-1), planned


# idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (mark via partial)
# expect: SG106
def apply_adaptive_draft_extend_v2(
    worker: AdaptiveEagleWorker,
    batch: ScheduleBatch,
    hidden: torch.Tensor,
    accept_lens: torch.Tensor,
    steps_table: Optional[Dict[int, int]] = None,
    mark_fn: Optional[Callable[[ForwardBatch], None]] = None,
    plan_fn: Optional[Callable[[ForwardBatch], None]] = None,
    ema: Optional[float] = None,
):
    steps_table = steps_table or {}
    steps = steps_table.get(batch.batch_size(), worker._pick_steps(batch))
    if ema is not None:
        ADAPTIVE_CFG["ema"] = ema
    plan_fn = plan_fn or worker.draft_runner.attn_backend.init_forward_metadata
    mark_fn = mark_fn or functools.partial(
        ForwardBatch.mark_forward_metadata_ready, replan_equivalent=False
    )
    fb = _draft_extend_fb(worker, batch, hidden, accept_lens, steps + 1)
    if not fb.forward_mode.is_idle():
        plan_fn(fb)
        mark_fn(fb)
    return worker.draft_runner.forward(fb).logits_output


# idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (mark via partial)
# expect: clean
def apply_adaptive_draft_extend(
    worker: AdaptiveEagleWorker,
    batch: ScheduleBatch,
    hidden: torch.Tensor,
    accept_lens: torch.Tensor,
    steps_table: Optional[Dict[int, int]] = None,
    ema: Optional[float] = None,
):
    steps_table = steps_table or {}
    steps = steps_table.get(batch.batch_size(), worker._pick_steps(batch))
    if ema is not None:
        ADAPTIVE_CFG["ema"] = ema
    plan_fn = worker.draft_runner.attn_backend.init_forward_metadata
    mark_fn = functools.partial(
        ForwardBatch.mark_forward_metadata_ready, replan_equivalent=True
    )
    fb = _draft_extend_fb(worker, batch, hidden, accept_lens, steps + 1)
    if not fb.forward_mode.is_idle():
        plan_fn(fb)
        mark_fn(fb)
    return worker.draft_runner.forward(fb).logits_output
