"""EAGLE v2 draft-decode variants used by our DP-attention deployments."""

from __future__ import annotations

import enum
import functools
import logging
from typing import List

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLAMultiStepDraftBackend,
)
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_info import EagleDraftInput
from sglang.srt.speculative.eagle_utils import (
    organize_draft_results,
    per_step_draft_out_cache_loc,
)
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils import is_npu
from sglang.srt.utils.common import fast_topk, require_mlp_sync

from blindsg7.spec.planning import pad_and_preplan_draft_batch, preplan_draft_batch

logger = logging.getLogger(__name__)

_is_npu = is_npu()


def _prepare(worker: EagleDraftWorker, batch: ScheduleBatch):
    return prepare_for_draft(
        batch.spec_info,
        worker.req_to_token_pool,
        batch,
        worker.cuda_graph_runner,
        worker.draft_runner,
        worker.topk,
        worker.speculative_num_steps,
        target_translator=worker.target_worker.model_runner.kv_index_translator,
        num_draft_tokens=worker.speculative_num_draft_tokens,
    )


def _finish(worker: EagleDraftWorker, batch, draft_input, outs, kv_loc_plan):
    parent_list, top_scores_index, draft_tokens, draft_probs = outs
    verify_input = build_eagle_verify_input(
        batch,
        draft_input,
        parent_list,
        top_scores_index,
        draft_tokens,
        draft_probs,
        target_worker=worker.target_worker,
        topk=worker.topk,
        num_steps=worker.speculative_num_steps,
        num_draft_tokens=worker.speculative_num_draft_tokens,
        tree_mask_mode=worker.tree_mask_mode,
        device=worker.device,
    )
    if kv_loc_plan is not None:
        verify_input.kv_loc_plan = kv_loc_plan
        verify_input.prepared_out_cache_loc = kv_loc_plan.write_virtual
    return verify_input


class DPEagleDraftWorker(EagleDraftWorker):
    """Draft worker that keeps the eager multi-step plan for DP-attention runs."""

    # expect: SG106
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = _prepare(self, batch)
        if can_run_decode_cuda_graph:
            outs = self.cuda_graph_runner.execute(forward_batch)
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            outs = self.draft_forward(forward_batch)
        return _finish(self, batch, draft_input, outs, kv_loc_plan)


class PaddedEagleDraftWorker(EagleDraftWorker):
    """Settles DP padding before the eager multi-step plan."""

    # expect: clean
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = _prepare(self, batch)
        if can_run_decode_cuda_graph:
            outs = self.cuda_graph_runner.execute(forward_batch)
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                if forward_batch.global_num_tokens_cpu is not None:
                    forward_batch.prepare_mlp_sync_batch(self.draft_runner)
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            outs = self.draft_forward(forward_batch)
        return _finish(self, batch, draft_input, outs, kv_loc_plan)


class ChainDraftWorker(EagleDraftWorker):
    """topk=1 chain draft with the step loop inlined (no tree bookkeeping)."""

    def _chain_step_inputs(self, forward_batch: ForwardBatch, i, topk_index):
        if i == 0:
            self._step_cache_loc = per_step_draft_out_cache_loc(
                forward_batch.out_cache_loc,
                forward_batch.batch_size,
                self.topk,
                self.speculative_num_steps,
            )
        forward_batch.input_ids = topk_index.flatten()
        forward_batch.out_cache_loc = self._step_cache_loc[i]

    # expect: SG106
    def run_chain_draft(self, forward_batch: ForwardBatch) -> List[torch.Tensor]:
        spec_info: EagleDraftInput = forward_batch.spec_info
        topk_index = spec_info.topk_index
        tokens = [topk_index]
        if forward_batch.forward_mode.is_idle():
            return tokens
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        for i in range(self.speculative_num_steps - 1):
            self._chain_step_inputs(forward_batch, i, topk_index)
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            topk_index = torch.argmax(
                logits_output.next_token_logits, dim=-1, keepdim=True
            )
            spec_info.hidden_states = logits_output.hidden_states
            forward_batch.positions.add_(1)
            tokens.append(topk_index)
        return tokens

    # expect: clean
    def run_chain_draft_replanned(
        self, forward_batch: ForwardBatch
    ) -> List[torch.Tensor]:
        spec_info: EagleDraftInput = forward_batch.spec_info
        topk_index = spec_info.topk_index
        tokens = [topk_index]
        if forward_batch.forward_mode.is_idle():
            return tokens
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        for i in range(self.speculative_num_steps - 1):
            self._chain_step_inputs(forward_batch, i, topk_index)
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            topk_index = torch.argmax(
                logits_output.next_token_logits, dim=-1, keepdim=True
            )
            spec_info.hidden_states = logits_output.hidden_states
            forward_batch.positions.add_(1)
            tokens.append(topk_index)
        return tokens


class BoundPlanDraftWorker(EagleDraftWorker):
    """Binds the plan call once so the hot path does not re-resolve backends."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._plan_draft = functools.partial(
            self.draft_attn_backend.init_forward_metadata
        )
        self._mark_kwargs = {"replan_equivalent": False}

    # expect: SG106
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = _prepare(self, batch)
        if can_run_decode_cuda_graph:
            outs = self.cuda_graph_runner.execute(forward_batch)
            return _finish(self, batch, draft_input, outs, kv_loc_plan)
        if not forward_batch.forward_mode.is_idle():
            self._plan_draft(forward_batch)
            forward_batch.mark_forward_metadata_ready(**self._mark_kwargs)
        outs = self.draft_forward(forward_batch)
        return _finish(self, batch, draft_input, outs, kv_loc_plan)


class SingleBackendDraftWorker(EagleDraftWorker):
    """Draft worker whose per-step forward uses the runner's own backend, so a
    forward-path re-plan rebuilds the same metadata."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._plan_draft = functools.partial(
            self.draft_runner.attn_backend.init_forward_metadata
        )
        self._mark_kwargs = {"replan_equivalent": True}

    # expect: clean
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = _prepare(self, batch)
        if can_run_decode_cuda_graph:
            outs = self.cuda_graph_runner.execute(forward_batch)
            return _finish(self, batch, draft_input, outs, kv_loc_plan)
        if not forward_batch.forward_mode.is_idle():
            self._plan_draft(forward_batch)
            forward_batch.mark_forward_metadata_ready(**self._mark_kwargs)
        outs = self.draft_forward(forward_batch)
        return _finish(self, batch, draft_input, outs, kv_loc_plan)


class HelperPlannedDraftWorker(EagleDraftWorker):
    @property
    def eager_draft_backend(self):
        return self.draft_attn_backend

    # expect: SG106
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = _prepare(self, batch)
        if can_run_decode_cuda_graph:
            outs = self.cuda_graph_runner.execute(forward_batch)
        else:
            forward_batch = preplan_draft_batch(self.eager_draft_backend, forward_batch)
            outs = self.draft_forward(forward_batch)
        return _finish(self, batch, draft_input, outs, kv_loc_plan)


class HelperPaddedDraftWorker(HelperPlannedDraftWorker):
    # expect: clean
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = _prepare(self, batch)
        if can_run_decode_cuda_graph:
            outs = self.cuda_graph_runner.execute(forward_batch)
        else:
            forward_batch = pad_and_preplan_draft_batch(
                self.eager_draft_backend, forward_batch, self.draft_runner
            )
            outs = self.draft_forward(forward_batch)
        return _finish(self, batch, draft_input, outs, kv_loc_plan)


class GraphFallbackDraftWorker(EagleDraftWorker):
    """Falls back to eager when graph replay rejects the batch at runtime."""

    # expect: SG106
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = _prepare(self, batch)
        try:
            if not can_run_decode_cuda_graph:
                raise RuntimeError("draft batch not capturable")
            outs = self.cuda_graph_runner.execute(forward_batch)
        except RuntimeError as e:
            logger.debug("eager draft fallback: %s", e)
            if not forward_batch.forward_mode.is_idle():
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            outs = self.draft_forward(forward_batch)
        return _finish(self, batch, draft_input, outs, kv_loc_plan)


class GraphFallbackReplanDraftWorker(EagleDraftWorker):
    # expect: clean
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = _prepare(self, batch)
        try:
            if not can_run_decode_cuda_graph:
                raise RuntimeError("draft batch not capturable")
            outs = self.cuda_graph_runner.execute(forward_batch)
        except RuntimeError as e:
            logger.debug("eager draft fallback: %s", e)
            outs = self.draft_forward(forward_batch)
        return _finish(self, batch, draft_input, outs, kv_loc_plan)


class NpuAwareDraftWorker(EagleDraftWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # NPU block tables are rebuilt inside forward_extend after padding.
        self.preplan_eager_draft = not _is_npu

    # expect: SG106
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = _prepare(self, batch)
        if can_run_decode_cuda_graph:
            return _finish(
                self,
                batch,
                draft_input,
                self.cuda_graph_runner.execute(forward_batch),
                kv_loc_plan,
            )
        if self.preplan_eager_draft and not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return _finish(
            self, batch, draft_input, self.draft_forward(forward_batch), kv_loc_plan
        )


class SyncAwareDraftWorker(EagleDraftWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # MLP-sync deployments keep the forward-path plan.
        self.preplan_eager_draft = not _is_npu and not require_mlp_sync()

    # expect: clean
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = _prepare(self, batch)
        if can_run_decode_cuda_graph:
            return _finish(
                self,
                batch,
                draft_input,
                self.cuda_graph_runner.execute(forward_batch),
                kv_loc_plan,
            )
        if self.preplan_eager_draft and not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return _finish(
            self, batch, draft_input, self.draft_forward(forward_batch), kv_loc_plan
        )


class LazyPlanDraftWorker(EagleDraftWorker):
    """Plans on the first draft step only, after the first token is chosen."""

    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        spec_info: EagleDraftInput = forward_batch.spec_info
        if forward_batch.forward_mode.is_idle():
            return self._draft_forward_idle(forward_batch, spec_info)
        topk_p, topk_index, hidden_states = (
            spec_info.topk_p,
            spec_info.topk_index,
            spec_info.hidden_states,
        )
        out_cache_loc = forward_batch.out_cache_loc.reshape(
            forward_batch.batch_size, self.topk, self.speculative_num_steps
        )
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
            if i == 0:
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            forward_batch.input_ids = input_ids
            forward_batch.out_cache_loc = out_cache_loc[:, :, i].flatten()
            spec_info.hidden_states = hidden_states
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            probs = torch.softmax(logits_output.next_token_logits, dim=-1)
            topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
            hidden_states = logits_output.hidden_states
        parent_list, top_scores_index, draft_tokens = organize_draft_results(
            score_list, token_list, parents_list, self.speculative_num_draft_tokens
        )
        return parent_list, top_scores_index, draft_tokens, None


class DraftPlanMode(enum.Enum):
    DEFER = "defer"
    PREPLAN = "preplan"
    PREPLAN_PADDED = "preplan_padded"


class PlanModeDraftWorker(EagleDraftWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if isinstance(self.draft_attn_backend, TRTLLMMLAMultiStepDraftBackend):
            self.plan_mode = DraftPlanMode.PREPLAN
        else:
            self.plan_mode = DraftPlanMode.DEFER

    # expect: SG106
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = _prepare(self, batch)
        if can_run_decode_cuda_graph:
            outs = self.cuda_graph_runner.execute(forward_batch)
            return _finish(self, batch, draft_input, outs, kv_loc_plan)
        if (
            self.plan_mode is DraftPlanMode.PREPLAN
            and not forward_batch.forward_mode.is_idle()
        ):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        outs = self.draft_forward(forward_batch)
        return _finish(self, batch, draft_input, outs, kv_loc_plan)


class PaddedPlanModeDraftWorker(EagleDraftWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if isinstance(self.draft_attn_backend, TRTLLMMLAMultiStepDraftBackend):
            self.plan_mode = DraftPlanMode.PREPLAN_PADDED
        else:
            self.plan_mode = DraftPlanMode.DEFER

    # expect: clean
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_decode_cuda_graph, kv_loc_plan = _prepare(self, batch)
        if can_run_decode_cuda_graph:
            outs = self.cuda_graph_runner.execute(forward_batch)
            return _finish(self, batch, draft_input, outs, kv_loc_plan)
        if (
            self.plan_mode is DraftPlanMode.PREPLAN_PADDED
            and not forward_batch.forward_mode.is_idle()
        ):
            if forward_batch.global_num_tokens_cpu is not None:
                forward_batch.prepare_mlp_sync_batch(self.draft_runner)
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        outs = self.draft_forward(forward_batch)
        return _finish(self, batch, draft_input, outs, kv_loc_plan)


class StreamPlannedDraftWorker(EagleDraftWorker):
    """Overlaps the eager draft plan with the tail of verify on the plan stream."""

    # expect: SG106
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        with self.plan_stream_ctx:
            forward_batch, can_run_decode_cuda_graph, kv_loc_plan = _prepare(
                self, batch
            )
            if not can_run_decode_cuda_graph and not forward_batch.forward_mode.is_idle():
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        if can_run_decode_cuda_graph:
            outs = self.cuda_graph_runner.execute(forward_batch)
        else:
            outs = self.draft_forward(forward_batch)
        return _finish(self, batch, draft_input, outs, kv_loc_plan)

    # expect: clean
    def draft_unsynced(self, batch: ScheduleBatch):
        """Same overlap, but only pre-plans batches that the forward will not
        pad for DP attention."""
        draft_input: EagleDraftInput = batch.spec_info
        with self.plan_stream_ctx:
            forward_batch, can_run_decode_cuda_graph, kv_loc_plan = _prepare(
                self, batch
            )
            if (
                not can_run_decode_cuda_graph
                and not forward_batch.forward_mode.is_idle()
                and forward_batch.global_num_tokens_cpu is None
            ):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
        if can_run_decode_cuda_graph:
            outs = self.cuda_graph_runner.execute(forward_batch)
        else:
            outs = self.draft_forward(forward_batch)
        return _finish(self, batch, draft_input, outs, kv_loc_plan)

