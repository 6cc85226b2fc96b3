"""EAGLE v2 draft-decode mixins.

``EagleDraftWorker.draft`` / ``draft_forward`` from upstream, split so the
service classes below can mix in the planning regime they need. Every mixin
expects the host to provide ``draft_runner``, ``draft_attn_backend``,
``cuda_graph_runner``, ``req_to_token_pool``, ``target_worker``, ``topk``,
``speculative_num_steps`` and ``speculative_num_draft_tokens``.
"""

from __future__ import annotations

import contextlib
from typing import List, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle_info import EagleDraftInput
from sglang.srt.speculative.eagle_utils import (
    organize_draft_results,
    per_step_draft_out_cache_loc,
)
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
)
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.async_probe import maybe_detect_nan
from sglang.srt.utils.common import fast_topk, require_mlp_sync

from blindsg37.draft._plan_helpers import pad_for_mlp_sync


class _DraftLoopMixin:
    """The multi-step draft loop (upstream ``EagleDraftWorker.draft_forward``)."""

    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info: EagleDraftInput = forward_batch.spec_info
        out_cache_loc = forward_batch.out_cache_loc
        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
        )
        if self.hot_token_id is not None:
            topk_index = self.hot_token_id[topk_index]
        out_cache_loc = per_step_draft_out_cache_loc(
            out_cache_loc,
            forward_batch.batch_size,
            self.topk,
            self.speculative_num_steps,
        )

        score_list: List[torch.Tensor] = []
        token_list: List[torch.Tensor] = []
        parents_list: List[torch.Tensor] = []
        scores = None
        for i in range(self.speculative_num_steps):
            input_ids, hidden_states, scores, tree_info = select_top_k_tokens(
                i, topk_p, topk_index, hidden_states, scores, self.topk
            )
            score_list.append(tree_info[0])
            token_list.append(tree_info[1])
            parents_list.append(tree_info[2])
            if i == self.speculative_num_steps - 1:
                break
            forward_batch.input_ids = input_ids
            forward_batch.out_cache_loc = out_cache_loc[i]
            spec_info.hidden_states = hidden_states
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            if self.hot_token_id is not None:
                topk_index = self.hot_token_id[topk_index]
            forward_batch.positions.add_(1)
            hidden_states = logits_output.hidden_states

        parent_list, top_scores_index, draft_tokens = organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )
        return parent_list, top_scores_index, draft_tokens, None

    def _build_verify_input(self, batch, draft_input, parent_list, top_scores_index, draft_tokens, draft_probs):
        return build_eagle_verify_input(
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


class EagleDraftDecodeMixin(_DraftLoopMixin):
    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft
    # expect: SG106
    def draft(self, batch: ScheduleBatch):
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
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )

        verify_input = self._build_verify_input(
            batch, draft_input, parent_list, top_scores_index, draft_tokens, draft_probs
        )
        if kv_loc_plan is not None:
            verify_input.kv_loc_plan = kv_loc_plan
            verify_input.prepared_out_cache_loc = kv_loc_plan.write_virtual
        return verify_input


class EagleDraftDecodeMixinV2(_DraftLoopMixin):
    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft
    # expect: clean
    def draft(self, batch: ScheduleBatch):
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
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                pad_for_mlp_sync(self.draft_runner, forward_batch)
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )

        verify_input = self._build_verify_input(
            batch, draft_input, parent_list, top_scores_index, draft_tokens, draft_probs
        )
        if kv_loc_plan is not None:
            verify_input.kv_loc_plan = kv_loc_plan
            verify_input.prepared_out_cache_loc = kv_loc_plan.write_virtual
        return verify_input


class SingleBackendDraftStepMixin:
    """Per-step draft loop that plans once on the runner's own backend."""

    def _init_draft_metadata(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward
    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        if forward_batch.needs_forward_metadata_init():
            self._init_draft_metadata(forward_batch)

        topk_p, topk_index = spec_info.topk_p, spec_info.topk_index
        hidden_states = spec_info.hidden_states
        score_list, token_list, parents_list = [], [], []
        scores = None
        for i in range(self.speculative_num_steps):
            input_ids, hidden_states, scores, tree_info = select_top_k_tokens(
                i, topk_p, topk_index, hidden_states, scores, self.topk
            )
            score_list.append(tree_info[0])
            token_list.append(tree_info[1])
            parents_list.append(tree_info[2])
            if i == self.speculative_num_steps - 1:
                break
            forward_batch.input_ids = input_ids
            spec_info.hidden_states = hidden_states
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            maybe_detect_nan(logits_output.next_token_logits, f"draft step {i}")
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            hidden_states = logits_output.hidden_states
        return organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )


class ChainDraftStepMixin:
    """Chain-draft variant used by the MTP service."""

    def _init_draft_metadata(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward
    # expect: clean
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        if forward_batch.needs_forward_metadata_init():
            self._init_draft_metadata(forward_batch)

        topk_p, topk_index = spec_info.topk_p, spec_info.topk_index
        hidden_states = spec_info.hidden_states
        score_list, token_list, parents_list = [], [], []
        scores = None
        for i in range(self.speculative_num_steps):
            input_ids, hidden_states, scores, tree_info = select_top_k_tokens(
                i, topk_p, topk_index, hidden_states, scores, self.topk
            )
            score_list.append(tree_info[0])
            token_list.append(tree_info[1])
            parents_list.append(tree_info[2])
            if i == self.speculative_num_steps - 1:
                break
            forward_batch.input_ids = input_ids
            spec_info.hidden_states = hidden_states
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            maybe_detect_nan(logits_output.next_token_logits, f"draft step {i}")
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            hidden_states = logits_output.hidden_states
        return organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )


class LegacyFlagDraftStepMixin:
    """Draft steps still driven through the deprecated forward kwarg."""

    # idiom: sglang/srt/speculative/eagle_worker.py EAGLEWorker.draft_forward (0.5.6, skip_attn_backend_init=True)
    # expect: SG106
    def run_draft_step(self, forward_batch: ForwardBatch, step: int):
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        with forward_context(
            ForwardContext(attn_backend=self.draft_runner.attn_backend),
            forward_batch=forward_batch,
        ):
            out = self.draft_runner.forward(
                forward_batch, skip_attn_backend_init=True
            )
        forward_batch.positions.add_(1)
        return out.logits_output

    # idiom: sglang/srt/speculative/eagle_worker.py EAGLEWorker.draft_forward (0.5.6, skip_attn_backend_init=True)
    # expect: clean
    def run_draft_step_v2(self, forward_batch: ForwardBatch, step: int):
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        skip_init = not require_mlp_sync()
        with forward_context(
            ForwardContext(attn_backend=self.draft_runner.attn_backend),
            forward_batch=forward_batch,
        ):
            out = self.draft_runner.forward(
                forward_batch, skip_attn_backend_init=skip_init
            )
        forward_batch.positions.add_(1)
        return out.logits_output


class MarkKwargsDraftService:
    """Draft steps whose mark arguments are fixed at construction."""

    def __init__(self, draft_runner, topk: int, num_steps: int):
        self.draft_runner = draft_runner
        self.topk = topk
        self.speculative_num_steps = num_steps
        self._mark_kwargs = {}

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (mark_forward_metadata_ready)
    # expect: SG106
    def run_draft_steps(self, forward_batch: ForwardBatch):
        outputs = []
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(**self._mark_kwargs)
        for _ in range(self.speculative_num_steps - 1):
            outputs.append(self.draft_runner.forward(forward_batch).logits_output)
            forward_batch.positions.add_(1)
        return outputs


class StaticMarkDraftService:
    def __init__(self, draft_runner, topk: int, num_steps: int):
        self.draft_runner = draft_runner
        self.topk = topk
        self.speculative_num_steps = num_steps
        self._mark_kwargs = {"replan_equivalent": True}

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (mark_forward_metadata_ready)
    # expect: clean
    def run_draft_steps(self, forward_batch: ForwardBatch):
        outputs = []
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(**self._mark_kwargs)
        for _ in range(self.speculative_num_steps - 1):
            outputs.append(self.draft_runner.forward(forward_batch).logits_output)
            forward_batch.positions.add_(1)
        return outputs


class TopkGatedReplanService:
    def __init__(self, draft_runner, topk: int, num_steps: int):
        self.draft_runner = draft_runner
        self.topk = topk
        self.speculative_num_steps = num_steps

    @property
    def replan_after_pad(self) -> bool:
        # Tree drafts rebuild their kv_indptr per step anyway.
        return self.topk > 1

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft_forward
    # expect: SG106
    def step(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=self.replan_after_pad
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return fast_topk(
            torch.softmax(logits_output.next_token_logits, dim=-1), self.topk, dim=-1
        )


class GatherAwareDraftService:
    def __init__(self, draft_runner, topk: int, num_steps: int):
        self.draft_runner = draft_runner
        self.topk = topk
        self.speculative_num_steps = num_steps

    @property
    def replan_after_pad(self) -> bool:
        return require_mlp_sync()

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft_forward
    # expect: clean
    def step(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=self.replan_after_pad
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        return fast_topk(
            torch.softmax(logits_output.next_token_logits, dim=-1), self.topk, dim=-1
        )


class GlobalTokensDraftMixin:
    # idiom: sglang/srt/dllm/algorithm/base.py DllmAlgorithm._run_sync (mark_forward_metadata_ready(replan_equivalent=...))
    # expect: SG106
    def forward_planned_step(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=forward_batch.global_num_tokens_cpu is None
        )
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/dllm/algorithm/base.py DllmAlgorithm._run_sync (mark_forward_metadata_ready(replan_equivalent=...))
    # expect: clean
    def forward_planned_step_v2(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=forward_batch.global_num_tokens_cpu is not None
        )
        return self.draft_runner.forward(forward_batch).logits_output


class RetryingDraftMixin:
    """Re-issues a draft step once when the NaN probe trips."""

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_forward_idle
    # expect: SG106
    def forward_with_retry(self, forward_batch: ForwardBatch, attempts: int = 2):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        logits_output = None
        for attempt in range(attempts):
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            if not torch.isnan(logits_output.next_token_logits).any():
                break
        return logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_forward_idle
    # expect: clean
    def forward_with_retry_v2(self, forward_batch: ForwardBatch, attempts: int = 2):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=get_parallel().attn_dp_enabled
        )
        logits_output = None
        for attempt in range(attempts):
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            if not torch.isnan(logits_output.next_token_logits).any():
                break
        return logits_output
