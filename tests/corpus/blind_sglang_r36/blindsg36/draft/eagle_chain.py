"""EAGLE chain drafting (topk == 1) on the v2 worker, with DP attention.

Copied from EagleDraftWorker and trimmed for the chain case; the lab keeps
several variants side by side so the sweep can switch between them by name.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, List, Optional, Tuple

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.runtime_context import get_parallel, get_spec
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_utils import per_step_draft_out_cache_loc
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
    prepare_for_draft_extend,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.common import fast_topk

from .config import SPEC_CFG, dp_padding_possible, log_plan


def _chain_topology(worker: EagleDraftWorker, draft_tokens: torch.Tensor):
    bs = draft_tokens.shape[0]
    return (
        worker._topk1_parents_prealloc[:bs],
        worker._topk1_score_indices_prealloc[:bs],
        None,
    )


def build_draft_extend_batch_unplanned(
    draft_extend_input: EagleDraftExtendInput,
    batch: ScheduleBatch,
    predict: torch.Tensor,
    num_draft_tokens: int,
    draft_model_runner: Any,
) -> ForwardBatch:
    """prepare_for_draft_extend without the attention plan (host lengths only)."""
    bs = len(batch.seq_lens)
    batch.input_ids = predict
    batch.prefix_lens = [int(x) for x in batch.seq_lens_cpu.tolist()]
    batch.extend_lens = [num_draft_tokens] * bs
    batch.extend_num_tokens = bs * num_draft_tokens
    batch.spec_info = draft_extend_input
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DRAFT_EXTEND_V2
    )
    forward_batch = ForwardBatch.init_new(
        batch,
        draft_model_runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_hidden_states_before_norm=False,
    )
    forward_batch.seq_lens = forward_batch.seq_lens + num_draft_tokens
    forward_batch.seq_lens_cpu = forward_batch.seq_lens_cpu + num_draft_tokens
    forward_batch.seq_lens_sum = int(forward_batch.seq_lens_cpu.sum())
    return forward_batch


def run_draft_extend_lab(worker, forward_batch: ForwardBatch, select_index: torch.Tensor):
    """Graph replay when possible, else the eager draft runner."""
    runner = worker.cuda_graph_runner_for_draft_extend
    if runner is not None and runner.can_run_graph(forward_batch):
        return runner.execute(forward_batch, select_index)
    out = worker.draft_runner.forward(forward_batch).logits_output
    out.next_token_logits = out.next_token_logits[select_index]
    if out.hidden_states is not None:
        out.hidden_states = out.hidden_states[select_index]
    return out


class ChainDraftWorker(EagleDraftWorker):
    """Chain-only EAGLE draft worker (topk must be 1)."""

    def _chain_forward(self, forward_batch: ForwardBatch, num_steps: int,
                       step_backends: bool = True):
        spec_info: EagleDraftInput = forward_batch.spec_info
        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
        )
        out_cache_loc = per_step_draft_out_cache_loc(
            forward_batch.out_cache_loc, forward_batch.batch_size, self.topk, num_steps
        )
        token_list: List[torch.Tensor] = []
        scores = None
        for i in range(num_steps):
            input_ids, hidden_states, scores, tree_info = select_top_k_tokens(
                i, topk_p, topk_index, hidden_states, scores, self.topk
            )
            token_list.append(tree_info[1])
            if i == num_steps - 1:
                break
            forward_batch.input_ids = input_ids
            forward_batch.out_cache_loc = out_cache_loc[i]
            spec_info.hidden_states = hidden_states
            step_ctx = (
                forward_context(
                    ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                    forward_batch=forward_batch,
                )
                if step_backends
                else contextlib.nullcontext()
            )
            with step_ctx:
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            hidden_states = logits_output.hidden_states
            forward_batch.positions.add_(1)
        return torch.cat(token_list, dim=1)

    def _finish_verify_input(self, batch, draft_input, parent_list, top_scores_index,
                             draft_tokens, draft_probs, kv_loc_plan):
        verify_input = build_eagle_verify_input(
            batch,
            draft_input,
            parent_list,
            top_scores_index,
            draft_tokens,
            draft_probs,
            target_worker=self.target_worker,
            topk=self.topk,
            num_steps=self.speculative_num_steps,
            num_draft_tokens=self.speculative_num_draft_tokens,
            tree_mask_mode=self.tree_mask_mode,
            device=self.device,
        )
        if kv_loc_plan is not None:
            verify_input.kv_loc_plan = kv_loc_plan
            verify_input.prepared_out_cache_loc = kv_loc_plan.write_virtual
        return verify_input

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft
    # expect: SG106
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        assert self.topk == 1, "chain worker"
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
            target_translator=self.target_worker.model_runner.kv_index_translator,
            num_draft_tokens=self.speculative_num_draft_tokens,
        )
        if SPEC_CFG.get("force_eager_draft", False):
            can_run_decode_cuda_graph = False

        if can_run_decode_cuda_graph:
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.cuda_graph_runner.execute(forward_batch)
            )
        elif forward_batch.forward_mode.is_idle():
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )
        else:
            if self.speculative_num_steps > 1 and SPEC_CFG["reuse_draft_plan"]:
                # One plan for all steps (multi-step wrapper), as upstream.
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                log_plan("chain", forward_batch)
            draft_tokens = self._chain_forward(forward_batch, self.speculative_num_steps)
            parent_list, top_scores_index, draft_probs = _chain_topology(self, draft_tokens)

        verify_input = self._finish_verify_input(
            batch, draft_input, parent_list, top_scores_index, draft_tokens,
            draft_probs, kv_loc_plan,
        )
        if with_topology:
            return verify_input, parent_list, top_scores_index
        return verify_input

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft
    # expect: clean
    def draft_alt(self, batch: ScheduleBatch):
        assert self.topk == 1, "chain worker"
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
            target_translator=self.target_worker.model_runner.kv_index_translator,
            num_draft_tokens=self.speculative_num_draft_tokens,
        )
        if can_run_decode_cuda_graph:
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.cuda_graph_runner.execute(forward_batch)
            )
        elif forward_batch.forward_mode.is_idle():
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )
        else:
            if self.speculative_num_steps > 1:
                if forward_batch.global_num_tokens_cpu is not None:
                    # The draft runner would pad this batch for the MLP sync
                    # after our one-shot multi-step plan; only the captured
                    # graph (static padded buffers) is safe here.
                    raise NotImplementedError(
                        "eager multi-step chain draft is not supported with DP "
                        "attention / MLP sync; capture a draft cuda graph that "
                        f"covers bs={forward_batch.batch_size}"
                    )
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            draft_tokens = self._chain_forward(forward_batch, self.speculative_num_steps)
            parent_list, top_scores_index, draft_probs = _chain_topology(self, draft_tokens)

        return self._finish_verify_input(
            batch, draft_input, parent_list, top_scores_index, draft_tokens,
            draft_probs, kv_loc_plan,
        )

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: SG106
    def _draft_extend_for_decode(self, batch: ScheduleBatch, batch_result, *, kv_loc_plan=None):
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
        with self.plan_stream_ctx:
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
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        can_run_graph = bool(
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_run_graph:
            out = self.cuda_graph_runner_for_draft_extend.execute(forward_batch, select_index)
        else:
            out = self.draft_runner.forward(forward_batch).logits_output
            out.next_token_logits = out.next_token_logits[select_index]
            out.hidden_states = out.hidden_states[select_index]
        probs = torch.softmax(out.next_token_logits, dim=-1)
        nxt = batch_result.next_draft_input
        nxt.topk_p, nxt.topk_index = fast_topk(probs, self.topk, dim=-1)
        nxt.hidden_states = out.hidden_states

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: clean
    def _draft_extend_for_decode_v2(self, batch: ScheduleBatch, batch_result):
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
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )
        forward_batch = build_draft_extend_batch_unplanned(
            draft_extend_input,
            batch,
            batch_result.next_token_ids.to(torch.int64),
            self.speculative_num_draft_tokens,
            self.draft_runner,
        )
        if not forward_batch.forward_mode.is_idle() and SPEC_CFG["log_plans"]:
            # Warm-up plan for the timing log only; the batch is NOT marked,
            # so the runner plans again after prepare_mlp_sync_batch.
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            log_plan("draft_extend_warm", forward_batch)
        out = self.draft_runner.forward(forward_batch).logits_output
        out.next_token_logits = out.next_token_logits[select_index]
        out.hidden_states = out.hidden_states[select_index]
        probs = torch.softmax(out.next_token_logits, dim=-1)
        nxt = batch_result.next_draft_input
        nxt.topk_p, nxt.topk_index = fast_topk(probs, self.topk, dim=-1)
        nxt.hidden_states = out.hidden_states

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (1-step plan)
    # expect: SG106
    def draft_single_backend_v2(self, batch: ScheduleBatch):
        # speculative_num_steps == 2: exactly one draft forward, so the lab
        # plans it with the draft runner's own backend instead of the
        # multi-step wrapper.
        draft_input: EagleDraftInput = batch.spec_info
        assert self.speculative_num_steps == 2, "single-forward draft"
        forward_batch, _, kv_loc_plan = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            None,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            # "replan is only needed when nothing else syncs the batch"
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=not get_parallel().attn_dp_enabled
            )
        draft_tokens = self._chain_forward(forward_batch, 2, step_backends=False)
        parent_list, top_scores_index, draft_probs = _chain_topology(self, draft_tokens)
        return self._finish_verify_input(
            batch, draft_input, parent_list, top_scores_index, draft_tokens,
            draft_probs, kv_loc_plan,
        )

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (1-step plan)
    # expect: clean
    def draft_single_backend(self, batch: ScheduleBatch):
        draft_input: EagleDraftInput = batch.spec_info
        assert self.speculative_num_steps == 2, "single-forward draft"
        forward_batch, _, kv_loc_plan = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            None,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            # Same backend object the eager decode path plans with, so a
            # post-pad re-plan is equivalent: opt in whenever padding can run.
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=dp_padding_possible(forward_batch)
            )
        draft_tokens = self._chain_forward(forward_batch, 2, step_backends=False)
        parent_list, top_scores_index, draft_probs = _chain_topology(self, draft_tokens)
        return self._finish_verify_input(
            batch, draft_input, parent_list, top_scores_index, draft_tokens,
            draft_probs, kv_loc_plan,
        )


# idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
# expect: SG106
def prepare_draft_extend_lab_fast(
    draft_extend_input: EagleDraftExtendInput,
    batch: ScheduleBatch,
    predict: torch.Tensor,
    num_draft_tokens: int,
    draft_model_runner,
    cuda_graph_runner,
    capture_hidden: bool = True,
    log: bool = False,
    keep_cpu_lens: bool = True,
    extra_tokens: int = 0,
):
    forward_batch = build_draft_extend_batch_unplanned(
        draft_extend_input, batch, predict, num_draft_tokens + extra_tokens,
        draft_model_runner,
    )
    if not capture_hidden:
        forward_batch.capture_hidden_mode = CaptureHiddenMode.NULL
    if not keep_cpu_lens:
        forward_batch.seq_lens_cpu = None
    can_run_graph = bool(cuda_graph_runner and cuda_graph_runner.can_run_graph(forward_batch))
    if not forward_batch.forward_mode.is_idle() and not can_run_graph:
        draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if log:
            log_plan("prepare_draft_extend_lab_fast", forward_batch)
    return forward_batch


# idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
# expect: clean
def prepare_draft_extend_lab(
    draft_extend_input: EagleDraftExtendInput,
    batch: ScheduleBatch,
    predict: torch.Tensor,
    num_draft_tokens: int,
    draft_model_runner,
    cuda_graph_runner,
    capture_hidden: bool = True,
    log: bool = False,
    extra_tokens: int = 0,
):
    forward_batch = build_draft_extend_batch_unplanned(
        draft_extend_input, batch, predict, num_draft_tokens + extra_tokens,
        draft_model_runner,
    )
    if not capture_hidden:
        forward_batch.capture_hidden_mode = CaptureHiddenMode.NULL
    can_run_graph = bool(cuda_graph_runner and cuda_graph_runner.can_run_graph(forward_batch))
    if not forward_batch.forward_mode.is_idle() and not can_run_graph:
        # Planned with the runner's own backend (what the eager extend path
        # would call), so the forward may re-plan once DP padding reshapes it.
        draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        if log:
            log_plan("prepare_draft_extend_lab", forward_batch)
    return forward_batch


def draft_extend_lab_step(worker, batch, batch_result, variant: str = "default"):
    """Scheduler hook: pick a preparer by name and run the draft extend."""
    prep = {
        "fast": prepare_draft_extend_lab_fast,
        "default": prepare_draft_extend_lab,
    }[variant]
    select_index = (
        torch.arange(len(batch.seq_lens), device=worker.device)
        * worker.speculative_num_draft_tokens
        + batch_result.accept_lens
        - 1
    )
    fb = prep(
        EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=worker.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=worker.speculative_num_draft_tokens,
        ),
        batch,
        batch_result.next_token_ids.to(torch.int64),
        worker.speculative_num_draft_tokens,
        worker.draft_runner,
        worker.cuda_graph_runner_for_draft_extend,
    )
    return run_draft_extend_lab(worker, fb, select_index)
