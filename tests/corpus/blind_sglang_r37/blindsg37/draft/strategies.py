"""Draft-extend strategy objects.

Upstream ``EagleDraftWorker._draft_extend_for_decode`` / ``_for_prefill``
pick between the draft-extend CUDA graph and an eager forward inline. The
fork moves that choice into strategy objects that hold the draft runner and
the attention backends as fields, so MTP / EAGLE3 / standalone can share them.
"""

from __future__ import annotations

from functools import partial
from typing import Dict, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft_extend
from sglang.srt.utils.common import fast_topk

from blindsg37.draft._plan_helpers import (
    DraftPlanPolicy,
    build_padded_planned_draft_extend,
    build_planned_draft_extend,
    last_hidden,
    pad_for_mlp_sync,
    plan_and_mark,
    run_draft_runner,
)


def _select_index(batch: ScheduleBatch, accept_lens: torch.Tensor, width: int):
    bs = len(batch.seq_lens)
    return (
        torch.arange(bs, device=accept_lens.device) * width + accept_lens - 1
    )


class DecodeDraftExtendStrategy:
    """Eager fallback of upstream ``_draft_extend_for_decode``."""

    def __init__(self, draft_runner, cuda_graph_runner_for_draft_extend, topk: int, num_draft_tokens: int, plan_stream_ctx):
        self.draft_runner = draft_runner
        self.cuda_graph_runner_for_draft_extend = cuda_graph_runner_for_draft_extend
        self.topk = topk
        self.speculative_num_draft_tokens = num_draft_tokens
        self.plan_stream_ctx = plan_stream_ctx

    def _draft_extend_input(self, batch_result: GenerationBatchResult):
        return EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.speculative_num_draft_tokens,
            num_tokens_for_logprob_per_req=self.speculative_num_draft_tokens,
        )

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: SG106
    def run(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        next_token_ids = batch_result.next_token_ids.to(torch.int64)
        select_index = _select_index(
            batch, batch_result.accept_lens, self.speculative_num_draft_tokens
        )
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                self._draft_extend_input(batch_result),
                batch,
                next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner,
                self.cuda_graph_runner_for_draft_extend,
                return_hidden_states_before_norm=False,
            )
        can_run_graph = (
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_run_graph:
            out = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            out = self.draft_runner.forward(forward_batch).logits_output
            out.next_token_logits = out.next_token_logits[select_index]
            out.hidden_states = last_hidden(out.hidden_states, select_index)
        probs = torch.softmax(out.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        nd = batch_result.next_draft_input
        nd.topk_p, nd.topk_index, nd.hidden_states = topk_p, topk_index, out.hidden_states

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode
    # expect: clean
    def run_v2(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        next_token_ids = batch_result.next_token_ids.to(torch.int64)
        select_index = _select_index(
            batch, batch_result.accept_lens, self.speculative_num_draft_tokens
        )
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                self._draft_extend_input(batch_result),
                batch,
                next_token_ids,
                self.speculative_num_draft_tokens,
                self.draft_runner,
                self.cuda_graph_runner_for_draft_extend,
                return_hidden_states_before_norm=False,
            )
        can_run_graph = (
            self.cuda_graph_runner_for_draft_extend
            and self.cuda_graph_runner_for_draft_extend.can_run_graph(forward_batch)
        )
        if can_run_graph:
            out = self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        else:
            if forward_batch.forward_metadata_ready:
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            out = self.draft_runner.forward(forward_batch).logits_output
            out.next_token_logits = out.next_token_logits[select_index]
            out.hidden_states = last_hidden(out.hidden_states, select_index)
        probs = torch.softmax(out.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        nd = batch_result.next_draft_input
        nd.topk_p, nd.topk_index, nd.hidden_states = topk_p, topk_index, out.hidden_states


class DefaultPolicyDraftExtendStrategy:
    def __init__(self, draft_runner, num_draft_tokens: int):
        self.draft_runner = draft_runner
        self.num_draft_tokens = num_draft_tokens
        self.policy = DraftPlanPolicy()

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
    # expect: SG106
    def execute(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle() or self.policy.plan_idle:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(**self.policy.mark_kwargs())
        return self.draft_runner.forward(forward_batch).logits_output


class TunedPolicyDraftExtendStrategy:
    def __init__(self, draft_runner, num_draft_tokens: int):
        self.draft_runner = draft_runner
        self.num_draft_tokens = num_draft_tokens
        self.policy = DraftPlanPolicy(replan_equivalent=True)

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
    # expect: clean
    def execute(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle() or self.policy.plan_idle:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(**self.policy.mark_kwargs())
        return self.draft_runner.forward(forward_batch).logits_output


class PartialPlannerStrategy:
    """Planner bound once at construction (multi-step draft backend)."""

    def __init__(self, draft_runner, draft_attn_backend):
        self.draft_runner = draft_runner
        self.draft_attn_backend = draft_attn_backend
        self._plan = partial(plan_and_mark, self.draft_attn_backend)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (draft_attn_backend.init_forward_metadata)
    # expect: SG106
    def execute(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return run_draft_runner(self.draft_runner, forward_batch)
        self._plan(forward_batch)
        return run_draft_runner(self.draft_runner, forward_batch)


class RunnerPartialPlannerStrategy:
    def __init__(self, draft_runner, draft_attn_backend):
        self.draft_runner = draft_runner
        self.draft_attn_backend = draft_attn_backend
        self._plan = partial(plan_and_mark, self.draft_runner.attn_backend, replan=True)

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (draft_attn_backend.init_forward_metadata)
    # expect: clean
    def execute(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return run_draft_runner(self.draft_runner, forward_batch)
        self._plan(forward_batch)
        return run_draft_runner(self.draft_runner, forward_batch)


class ModeKeyedDraftStrategy:
    """One backend per forward mode (decode / draft-extend)."""

    def __init__(self, draft_runner, decode_backend, extend_backend):
        self.draft_runner = draft_runner
        self.backends: Dict[ForwardMode, object] = {
            ForwardMode.DECODE: decode_backend,
            ForwardMode.DRAFT_EXTEND_V2: extend_backend,
        }

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.init_attention_backend / draft_extend_attn_backend
    # expect: SG106
    def execute(self, forward_batch: ForwardBatch):
        backend = self.backends.get(forward_batch.forward_mode)
        if backend is not None:
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.init_attention_backend / draft_extend_attn_backend
    # expect: clean
    def execute_for_mode(self, forward_batch: ForwardBatch):
        backend = self.backends.get(forward_batch.forward_mode)
        if backend is not None:
            pad_for_mlp_sync(self.draft_runner, forward_batch)
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output


class DraftExtendStrategyBase:
    def __init__(self, draft_runner):
        self.draft_runner = draft_runner

    def _plan(self, forward_batch: ForwardBatch) -> None:
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()


class EagerDraftExtendStrategy(DraftExtendStrategyBase):
    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode
    # expect: SG106
    def execute(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        if not forward_batch.forward_mode.is_idle():
            self._plan(forward_batch)
        out = self.draft_runner.forward(forward_batch).logits_output
        return out.next_token_logits[select_index]


class LayerwiseDraftExtendStrategy(DraftExtendStrategyBase):
    def _plan(self, forward_batch: ForwardBatch) -> None:
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode
    # expect: clean
    def execute(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        if not forward_batch.forward_mode.is_idle():
            self._plan(forward_batch)
        out = self.draft_runner.forward(forward_batch).logits_output
        return out.next_token_logits[select_index]


class DraftStepService:
    """Builds the draft-extend batch through a module helper, then runs it."""

    def __init__(self, draft_runner, topk: int, num_draft_tokens: int):
        self.draft_runner = draft_runner
        self.topk = topk
        self.num_draft_tokens = num_draft_tokens

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
    # expect: SG106
    def run_step(self, batch: ScheduleBatch, hidden_states, predict):
        forward_batch = build_planned_draft_extend(
            batch, self.draft_runner, hidden_states, predict, self.num_draft_tokens
        )
        logits_output = run_draft_runner(self.draft_runner, forward_batch)
        return fast_topk(
            torch.softmax(logits_output.next_token_logits, dim=-1), self.topk, dim=-1
        )

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend
    # expect: clean
    def run_step_v2(self, batch: ScheduleBatch, hidden_states, predict):
        forward_batch = build_padded_planned_draft_extend(
            batch, self.draft_runner, hidden_states, predict, self.num_draft_tokens
        )
        logits_output = run_draft_runner(self.draft_runner, forward_batch)
        return fast_topk(
            torch.softmax(logits_output.next_token_logits, dim=-1), self.topk, dim=-1
        )


class SpecPlanService:
    """Plans the verify and draft-extend batches out of the forward path."""

    def __init__(self, target_runner, draft_runner, verify_backend, extend_backend):
        self.target_runner = target_runner
        self.draft_runner = draft_runner
        self.backends = {"verify": verify_backend, "draft_extend": extend_backend}

    # idiom: sglang/srt/speculative/eagle_worker_common.py run_eagle_verify (metadata_ready_pre_pad)
    # expect: clean
    def run_verify(self, verify_forward_batch: ForwardBatch, can_run_cuda_graph: bool):
        if can_run_cuda_graph:
            self.target_runner.decode_cuda_graph_runner.load_batch(verify_forward_batch)
        elif not verify_forward_batch.forward_mode.is_idle():
            self.backends["verify"].init_forward_metadata(verify_forward_batch)
        verify_forward_batch.mark_forward_metadata_ready()
        return self.target_runner.forward(verify_forward_batch)

    # idiom: sglang/srt/speculative/eagle_worker_common.py run_eagle_verify (metadata_ready_pre_pad)
    # expect: SG106
    def run_draft_extend(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.backends["draft_extend"].init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch)
