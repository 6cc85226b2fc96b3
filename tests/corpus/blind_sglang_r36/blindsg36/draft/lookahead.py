"""Lookahead / n-gram drafting feeding an EAGLE verifier.

n-gram matches over the request's own history (plus an optional corpus)
propose a window of tokens; the EAGLE draft model extends that window to get
hidden states for a second EAGLE round, and the target verifies the union as
one EAGLE tree.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, List, Optional, Tuple

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import (
    EagleDraftExtendInput,
    EagleDraftInput,
    EagleVerifyInput,
)
from sglang.srt.speculative.ngram_info import NgramVerifyInput
from sglang.srt.utils.common import fast_topk

from .config import LOOKAHEAD_CFG, LOOKAHEAD_STATE, log_plan


def _suffix_match(history: List[int], window: int, min_match: int) -> List[int]:
    for n in range(min(len(history) - 1, 2 * window), min_match - 1, -1):
        suffix = history[-n:]
        for start in range(len(history) - n - 1, -1, -1):
            if history[start : start + n] == suffix:
                cont = history[start + n : start + n + window]
                if cont:
                    return cont
    return []


class LookaheadEagleWorker:
    def __init__(self, target_worker, draft_worker, server_args, corpus: Optional[Dict] = None):
        self.target_worker = target_worker
        self.draft_worker = draft_worker
        self.server_args = server_args
        self.corpus = corpus or {}
        self.window = LOOKAHEAD_CFG["window"]
        self.device = draft_worker.device
        self.topk = draft_worker.topk

    def _match_ngrams(self, batch: ScheduleBatch) -> torch.Tensor:
        rows = []
        for req in batch.reqs:
            hist = list(req.origin_input_ids) + list(req.output_ids)
            cont = _suffix_match(hist, self.window, LOOKAHEAD_CFG["min_match"])
            cont = (cont + [hist[-1]] * self.window)[: self.window]
            rows.append(cont)
        return torch.tensor(rows, dtype=torch.int64, device=self.device)

    def _ngram_extend_batch(self, batch: ScheduleBatch, candidates: torch.Tensor,
                            hidden: torch.Tensor) -> ForwardBatch:
        bs, w = candidates.shape
        batch.input_ids = candidates.flatten()
        batch.prefix_lens = [int(x) for x in batch.seq_lens_cpu.tolist()]
        batch.extend_lens = [w] * bs
        batch.extend_num_tokens = bs * w
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=hidden,
            num_tokens_per_req=w,
            num_tokens_for_logprob_per_req=w,
        )
        batch.forward_mode = (
            ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DRAFT_EXTEND_V2
        )
        fb = ForwardBatch.init_new(
            batch,
            self.draft_worker.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )
        fb.seq_lens = fb.seq_lens + w
        fb.seq_lens_cpu = fb.seq_lens_cpu + w
        fb.seq_lens_sum = int(fb.seq_lens_cpu.sum())
        return fb

    def _ngram_decode_batch(self, batch: ScheduleBatch, last_tokens: torch.Tensor,
                            hidden: torch.Tensor) -> ForwardBatch:
        batch.input_ids = last_tokens
        batch.spec_info = EagleDraftInput(
            hidden_states=hidden,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )
        batch.forward_mode = (
            ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DECODE
        )
        return ForwardBatch.init_new(
            batch,
            self.draft_worker.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            return_hidden_states_before_norm=False,
        )

    def _ngram_verify_batch(self, batch: ScheduleBatch, candidates: torch.Tensor) -> ForwardBatch:
        bs, w = candidates.shape
        batch.spec_info = NgramVerifyInput(
            draft_token=candidates.flatten(),
            positions=(batch.seq_lens.unsqueeze(1) + torch.arange(w, device=self.device)).flatten(),
            draft_token_num=w,
        )
        batch.forward_mode = (
            ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.TARGET_VERIFY
        )
        return ForwardBatch.init_new(
            batch,
            self.target_worker.model_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend + EagleDraftWorker._draft_extend_for_decode
    # expect: SG106
    def _extend_ngram_window_exp(self, batch: ScheduleBatch, hidden: torch.Tensor):
        runner = self.draft_worker.draft_runner
        plan = runner.attn_backend.init_forward_metadata
        mark = lambda fb: fb.mark_forward_metadata_ready()
        candidates = self._match_ngrams(batch)
        fb = self._ngram_extend_batch(batch, candidates, hidden)
        if not fb.forward_mode.is_idle() and LOOKAHEAD_CFG["rescore_with_draft"]:
            plan(fb)
            mark(fb)
        out = runner.forward(fb).logits_output
        probs = torch.softmax(out.next_token_logits, dim=-1)
        return candidates, fast_topk(probs, self.topk, dim=-1), out.hidden_states

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend + EagleDraftWorker._draft_extend_for_decode
    # expect: clean
    def _extend_ngram_window(self, batch: ScheduleBatch, hidden: torch.Tensor):
        runner = self.draft_worker.draft_runner
        plan = runner.attn_backend.init_forward_metadata
        mark = lambda fb: fb.mark_forward_metadata_ready(replan_equivalent=True)
        candidates = self._match_ngrams(batch)
        fb = self._ngram_extend_batch(batch, candidates, hidden)
        if not fb.forward_mode.is_idle() and LOOKAHEAD_CFG["rescore_with_draft"]:
            plan(fb)
            mark(fb)
        out = runner.forward(fb).logits_output
        probs = torch.softmax(out.next_token_logits, dim=-1)
        return candidates, fast_topk(probs, self.topk, dim=-1), out.hidden_states

    # idiom: sglang 0.5.6 speculative/eagle_worker_v2.py _draft_extend_for_decode (skip_attn_backend_init=True)
    # expect: SG106
    def extend_accepted_ngram(self, batch: ScheduleBatch, accepted: torch.Tensor,
                              hidden: torch.Tensor, **overrides):
        runner = self.draft_worker.draft_runner
        fb = self._ngram_extend_batch(batch, accepted, hidden)
        fwd_kwargs: Dict[str, Any] = {"skip_attn_backend_init": False}
        if not fb.forward_mode.is_idle():
            runner.attn_backend.init_forward_metadata(fb)
            fwd_kwargs["skip_attn_backend_init"] = True
        fwd_kwargs.update(overrides)
        out = runner.forward(fb, **fwd_kwargs).logits_output
        return out

    # idiom: sglang 0.5.6 speculative/eagle_worker_v2.py EAGLEWorkerV2.verify (skip_attn_backend_init=True)
    # expect: clean
    def verify_ngram_tree(self, batch: ScheduleBatch, candidates: torch.Tensor, **overrides):
        model_runner = self.target_worker.model_runner
        verify_fb = self._ngram_verify_batch(batch, candidates)
        fwd_kwargs: Dict[str, Any] = {}
        graph = model_runner.decode_cuda_graph_runner
        if graph is not None and graph.can_run_graph(verify_fb):
            out = model_runner.forward(verify_fb)
        else:
            if not verify_fb.forward_mode.is_idle():
                model_runner.attn_backend.init_forward_metadata(verify_fb)
                # Maps onto mark_forward_metadata_ready(); harmless here: the
                # eager runner re-plans TARGET_VERIFY after DP padding anyway.
                fwd_kwargs["skip_attn_backend_init"] = True
            fwd_kwargs.update(overrides)
            out = model_runner.forward(verify_fb, **fwd_kwargs)
        return out.logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (1-step plan, getattr knob)
    # expect: SG106
    def draft_ngram_chain(self, batch: ScheduleBatch, hidden: torch.Tensor):
        runner = self.draft_worker.draft_runner
        last = torch.tensor([r.output_ids[-1] for r in batch.reqs], device=self.device)
        fb = self._ngram_decode_batch(batch, last, hidden)
        if not fb.forward_mode.is_idle():
            runner.attn_backend.init_forward_metadata(fb)
            replan = getattr(self.server_args, "speculative_replan_after_pad", False)
            fb.mark_forward_metadata_ready(replan_equivalent=replan)
        out = runner.forward(fb).logits_output
        return fast_topk(torch.softmax(out.next_token_logits, dim=-1), self.topk, dim=-1)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (1-step plan, getattr knob)
    # expect: clean
    def draft_ngram_chain_v2(self, batch: ScheduleBatch, hidden: torch.Tensor):
        runner = self.draft_worker.draft_runner
        last = torch.tensor([r.output_ids[-1] for r in batch.reqs], device=self.device)
        fb = self._ngram_decode_batch(batch, last, hidden)
        if not fb.forward_mode.is_idle():
            runner.attn_backend.init_forward_metadata(fb)
            replan = getattr(fb, "global_num_tokens_cpu", None) is not None
            fb.mark_forward_metadata_ready(replan_equivalent=replan)
        out = runner.forward(fb).logits_output
        return fast_topk(torch.softmax(out.next_token_logits, dim=-1), self.topk, dim=-1)


# idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (staged plan-stream batch)
# expect: SG106
def ngram_draft_then_eagle_v2(
    worker: LookaheadEagleWorker,
    batch: ScheduleBatch,
    hidden: torch.Tensor,
    *,
    window: Optional[int] = None,
    min_match: Optional[int] = None,
    stage: bool = True,
    plan_ctx=None,
):
    if window is not None:
        worker.window = window
    if min_match is not None:
        LOOKAHEAD_CFG["min_match"] = min_match
    runner = worker.draft_worker.draft_runner
    last = worker._match_ngrams(batch)[:, -1]
    fb = worker._ngram_decode_batch(batch, last, hidden)
    if not fb.forward_mode.is_idle():
        if plan_ctx is not None:
            with plan_ctx:
                runner.attn_backend.init_forward_metadata(fb)
        else:
            runner.attn_backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()
    LOOKAHEAD_STATE.update(fb=fb, graph=False, runner=runner)
    if not stage:
        return flush_lookahead_state()
    return None


# idiom: sglang/srt/speculative/eagle_utils.py eagle_prepare_for_verify (graph-only mark, staged)
# expect: clean
def ngram_draft_then_eagle(
    worker: LookaheadEagleWorker,
    batch: ScheduleBatch,
    hidden: torch.Tensor,
    *,
    window: Optional[int] = None,
    stage: bool = True,
):
    if window is not None:
        worker.window = window
    runner = worker.draft_worker.draft_runner
    last = worker._match_ngrams(batch)[:, -1]
    fb = worker._ngram_decode_batch(batch, last, hidden)
    graph = runner.decode_cuda_graph_runner
    can_graph = bool(graph and graph.can_run_graph(fb))
    if can_graph and not fb.forward_mode.is_idle():
        graph.load_batch(fb)
        fb.mark_forward_metadata_ready()
    LOOKAHEAD_STATE.update(fb=fb, graph=can_graph, runner=runner)
    if not stage:
        return flush_lookahead_state()
    return None


def flush_lookahead_state():
    fb = LOOKAHEAD_STATE.get("fb")
    runner = LOOKAHEAD_STATE.get("runner")
    if fb is None or runner is None:
        return None
    LOOKAHEAD_STATE["fb"] = None
    out = runner.forward(fb).logits_output
    log_plan("lookahead_flush", fb)
    return out
