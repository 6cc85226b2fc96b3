"""EAGLE tree drafting / verification experiments (topk > 1) with DP attention.

Tree levels are drafted either with the multi-step draft backend (upstream
shape) or as independent per-level batches through the draft runner's own
backend; after verification the accepted tree can be re-scored by the draft
model in DRAFT_EXTEND_V2 mode.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Dict, List, Optional, Sequence

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_info import (
    EagleDraftExtendInput,
    EagleDraftInput,
    EagleVerifyInput,
)
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.common import fast_topk

from .config import SPEC_CFG, log_plan


def _tree_step_outputs(logits_output, topk: int):
    probs = torch.softmax(logits_output.next_token_logits, dim=-1)
    topk_p, topk_index = fast_topk(probs, topk, dim=-1)
    return topk_p, topk_index, logits_output.hidden_states


class TreeVerifyLab:
    """Target verify + draft re-score of an EAGLE tree."""

    def __init__(self, target_worker, draft_worker, topk: int, num_steps: int,
                 num_draft_tokens: int, device: str, plan_stream_ctx=None):
        self.target_worker = target_worker
        self.draft_worker = draft_worker
        self.topk = topk
        self.num_steps = num_steps
        self.num_draft_tokens = num_draft_tokens
        self.device = device
        self.plan_stream_ctx = plan_stream_ctx or contextlib.nullcontext()

    # idiom: sglang/srt/speculative/eagle_utils.py eagle_prepare_for_verify
    # expect: clean
    def prepare_verify_marked(self, batch: ScheduleBatch, verify_input: EagleVerifyInput):
        batch.spec_info = verify_input
        batch.forward_mode = (
            ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.TARGET_VERIFY
        )
        model_runner = self.target_worker.model_runner
        verify_fb = ForwardBatch.init_new(
            batch,
            model_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
            kv_loc_plan=verify_input.kv_loc_plan,
        )
        graph_runner = model_runner.decode_cuda_graph_runner
        can_run_cuda_graph = bool(graph_runner and graph_runner.can_run_graph(verify_fb))
        if can_run_cuda_graph:
            graph_runner.load_batch(verify_fb)
            verify_fb.mark_forward_metadata_ready()
        elif not verify_fb.forward_mode.is_idle():
            # Overlap the host side of the verify plan with the draft tail.
            # The eager extend path re-plans TARGET_VERIFY from the final,
            # post-pad batch whatever the marker says, so this is only a
            # warm-up for the DP-off case.
            with self.plan_stream_ctx:
                model_runner.attn_backend.init_forward_metadata(verify_fb)
            verify_fb.mark_forward_metadata_ready()
        return verify_fb, can_run_cuda_graph

    # idiom: sglang/srt/speculative/eagle_utils.py eagle_prepare_for_verify (draft re-score)
    # expect: SG106
    def prepare_tree_draft_extend_marked(self, batch: ScheduleBatch, accepted_hidden: torch.Tensor,
                                         accept_lens: torch.Tensor):
        draft_runner = self.draft_worker.draft_runner
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=accepted_hidden,
            num_correct_drafts=accept_lens - 1,
            num_accept_tokens=accept_lens,
            num_tokens_per_req=self.num_draft_tokens,
            num_tokens_for_logprob_per_req=self.num_draft_tokens,
        )
        batch.forward_mode = (
            ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DRAFT_EXTEND_V2
        )
        rescore_fb = ForwardBatch.init_new(
            batch,
            draft_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )
        graph_runner = self.draft_worker.cuda_graph_runner_for_draft_extend
        can_run_cuda_graph = bool(graph_runner and graph_runner.can_run_graph(rescore_fb))
        if not can_run_cuda_graph and not rescore_fb.forward_mode.is_idle():
            with self.plan_stream_ctx:
                draft_runner.attn_backend.init_forward_metadata(rescore_fb)
            rescore_fb.mark_forward_metadata_ready()
        return rescore_fb, can_run_cuda_graph

    def verify_and_rescore(self, batch: ScheduleBatch, verify_input: EagleVerifyInput):
        verify_fb, _ = self.prepare_verify_marked(batch, verify_input)
        out = self.target_worker.forward_batch_generation(
            batch=None, forward_batch=verify_fb, is_verify=True
        )
        accept_lens = out.accept_lens if hasattr(out, "accept_lens") else None
        if accept_lens is None or not SPEC_CFG.get("rescore_tree", True):
            return out
        rescore_fb, graph = self.prepare_tree_draft_extend_marked(
            batch, out.logits_output.hidden_states, accept_lens
        )
        if graph:
            return self.draft_worker.cuda_graph_runner_for_draft_extend.execute(
                rescore_fb, accept_lens - 1
            )
        return self.draft_worker.draft_runner.forward(rescore_fb).logits_output


class TreeDraftLab:
    """Tree drafting, topk > 1."""

    def __init__(self, worker, levels: Optional[int] = None):
        self.worker = worker
        self.levels = levels or SPEC_CFG["tree_levels"]

    def _prepare(self, batch: ScheduleBatch):
        w = self.worker
        return prepare_for_draft(
            batch.spec_info,
            w.req_to_token_pool,
            batch,
            w.cuda_graph_runner,
            w.draft_runner,
            w.topk,
            self.levels,
        )

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft / draft_forward
    # expect: SG106
    def draft_tree_levels(self, batch: ScheduleBatch):
        w = self.worker
        forward_batch, can_run_graph, _ = self._prepare(batch)
        if can_run_graph:
            return w.cuda_graph_runner.execute(forward_batch)
        backend = w.draft_attn_backend

        def _plan(fb: ForwardBatch) -> ForwardBatch:
            backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()
            log_plan("tree", fb)
            return fb

        fb = forward_batch if forward_batch.forward_mode.is_idle() else _plan(forward_batch)
        spec_info: EagleDraftInput = fb.spec_info
        topk_p, topk_index, hidden = spec_info.topk_p, spec_info.topk_index, spec_info.hidden_states
        scores, score_list, token_list, parents_list = None, [], [], []
        for level in range(self.levels):
            input_ids, hidden, scores, tree_info = select_top_k_tokens(
                level, topk_p, topk_index, hidden, scores, w.topk
            )
            score_list.append(tree_info[0])
            token_list.append(tree_info[1])
            parents_list.append(tree_info[2])
            if level == self.levels - 1:
                break
            fb.input_ids = input_ids
            spec_info.hidden_states = hidden
            with forward_context(
                ForwardContext(attn_backend=backend.attn_backends[level]),
                forward_batch=fb,
            ):
                logits_output = w.draft_runner.forward(fb).logits_output
            topk_p, topk_index, hidden = _tree_step_outputs(logits_output, w.topk)
            fb.positions.add_(1)
        return organize_draft_results(
            score_list, token_list, parents_list, w.speculative_num_draft_tokens
        )

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft / draft_forward
    # expect: clean
    def draft_tree_levels_b(self, batch: ScheduleBatch):
        w = self.worker
        forward_batch, can_run_graph, _ = self._prepare(batch)
        if can_run_graph:
            return w.cuda_graph_runner.execute(forward_batch)
        own_backend = w.draft_runner.attn_backend

        def _plan(fb: ForwardBatch) -> ForwardBatch:
            # Per-level plan through the runner's own backend: the forward's
            # re-plan after DP padding is the same call on the padded batch.
            own_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready(replan_equivalent=True)
            return fb

        fb = forward_batch
        spec_info: EagleDraftInput = fb.spec_info
        topk_p, topk_index, hidden = spec_info.topk_p, spec_info.topk_index, spec_info.hidden_states
        scores, score_list, token_list, parents_list = None, [], [], []
        for level in range(self.levels):
            input_ids, hidden, scores, tree_info = select_top_k_tokens(
                level, topk_p, topk_index, hidden, scores, w.topk
            )
            score_list.append(tree_info[0])
            token_list.append(tree_info[1])
            parents_list.append(tree_info[2])
            if level == self.levels - 1:
                break
            fb.input_ids = input_ids
            spec_info.hidden_states = hidden
            if not fb.forward_mode.is_idle():
                _plan(fb)
            logits_output = w.draft_runner.forward(fb).logits_output
            topk_p, topk_index, hidden = _tree_step_outputs(logits_output, w.topk)
            fb.positions.add_(1)
            fb.seq_lens = fb.seq_lens + 1
        return organize_draft_results(
            score_list, token_list, parents_list, w.speculative_num_draft_tokens
        )


# idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft_forward (per-level batches)
# expect: SG106
def run_tree_levels(
    level_batches: Sequence[ForwardBatch],
    draft_runner,
    topk: int,
    *,
    on_level: Optional[Callable] = None,
    keep_hidden: bool = True,
    cfg: Optional[Dict] = None,
):
    cfg = cfg or SPEC_CFG
    backend = draft_runner.attn_backend
    planned = [
        (backend.init_forward_metadata(fb), fb.mark_forward_metadata_ready(), fb)[-1]
        for fb in level_batches
        if not fb.forward_mode.is_idle()
    ]
    outs = []
    for level, fb in enumerate(planned):
        logits_output = draft_runner.forward(fb).logits_output
        topk_p, topk_index, hidden = _tree_step_outputs(logits_output, topk)
        outs.append((topk_p, topk_index, hidden if keep_hidden else None))
        if on_level is not None:
            on_level(level, fb, outs[-1])
        if cfg.get("log_plans"):
            log_plan(f"level{level}", fb)
    return outs


# idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft_forward (per-level batches)
# expect: clean
def run_tree_levels_staged(
    level_batches: Sequence[ForwardBatch],
    draft_runner,
    topk: int,
    *,
    on_level: Optional[Callable] = None,
    keep_hidden: bool = True,
    cfg: Optional[Dict] = None,
):
    cfg = cfg or SPEC_CFG
    graph_runner = draft_runner.decode_cuda_graph_runner
    graph_ok = lambda fb: bool(graph_runner and graph_runner.can_run_graph(fb))
    # Only batches the decode graph will replay are pre-loaded and marked;
    # the graph pads inside its static buffers.  Eager levels stay unplanned
    # and are planned by the forward after prepare_mlp_sync_batch.
    staged = [
        (graph_runner.load_batch(fb), fb.mark_forward_metadata_ready(), fb)[-1]
        if graph_ok(fb) and not fb.forward_mode.is_idle()
        else fb
        for fb in level_batches
    ]
    outs = []
    for level, fb in enumerate(staged):
        logits_output = draft_runner.forward(fb).logits_output
        topk_p, topk_index, hidden = _tree_step_outputs(logits_output, topk)
        outs.append((topk_p, topk_index, hidden if keep_hidden else None))
        if on_level is not None:
            on_level(level, fb, outs[-1])
    return outs


class TreeDraftBase:
    """Re-score an accepted tree with the draft model (DRAFT_EXTEND_V2)."""

    def __init__(self, worker):
        self.worker = worker

    def _pre_plan(self, forward_batch: ForwardBatch) -> None:
        # Warm the backend's host buffers; the forward plans for real.
        self.worker.draft_runner.attn_backend.init_forward_metadata(forward_batch)

    def _build(self, batch: ScheduleBatch, hidden: torch.Tensor, accept_lens: torch.Tensor):
        w = self.worker
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=hidden,
            num_correct_drafts=accept_lens - 1,
            num_accept_tokens=accept_lens,
            num_tokens_per_req=w.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=w.speculative_num_draft_tokens,
        )
        batch.forward_mode = (
            ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DRAFT_EXTEND_V2
        )
        return ForwardBatch.init_new(
            batch,
            w.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )

    def run(self, batch: ScheduleBatch, hidden: torch.Tensor, accept_lens: torch.Tensor):
        fb = self._build(batch, hidden, accept_lens)
        if not fb.forward_mode.is_idle():
            self._pre_plan(fb)
        return self.worker.draft_runner.forward(fb).logits_output


class TreeDraftPlannedV2(TreeDraftBase):
    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (mark after plan)
    # expect: SG106
    def _pre_plan(self, forward_batch: ForwardBatch) -> None:
        super()._pre_plan(forward_batch)
        # Saves the second plan in the runner (~40us at bs=64).
        forward_batch.mark_forward_metadata_ready()


class TreeDraftPlanned(TreeDraftBase):
    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (mark after plan)
    # expect: clean
    def _pre_plan(self, forward_batch: ForwardBatch) -> None:
        super()._pre_plan(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
