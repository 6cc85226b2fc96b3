"""Multi-step draft decode for the fork's EAGLE / MTP / multi-layer workers.

Mirrors ``EagleDraftWorker.draft`` (plan the multi-step draft backend once,
mark the batch, run ``draft_forward``), with the fork's own step loop.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, ClassVar, Dict

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)

from blindsg12.spec.plan_helpers import (
    DEFAULT_DRAFT_EXTEND_PLAN,
    mark_per_config,
    mark_replannable,
)


class ForkEagleStepDraftWorker(EagleDraftWorker):
    """Draft decode with an explicit per-step loop (no draft CUDA graph)."""

    # expect: SG106
    def draft_eager_steps(self, batch):
        forward_batch, can_graph, _ = prepare_for_draft(
            batch.spec_info,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if can_graph:
            return self.cuda_graph_runner.execute(forward_batch)
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        outputs = []
        for _ in range(self.speculative_num_steps - 1):
            outputs.append(self.draft_runner.forward(forward_batch).logits_output)
            forward_batch.positions.add_(1)
        return outputs

    # expect: clean
    def draft_eager_steps_padded_first(self, batch):
        forward_batch, can_graph, _ = prepare_for_draft(
            batch.spec_info,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if can_graph:
            return self.cuda_graph_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            # DP attention: pad to the synced shape before building the plan.
            forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        outputs = []
        for _ in range(self.speculative_num_steps - 1):
            outputs.append(self.draft_runner.forward(forward_batch).logits_output)
            forward_batch.positions.add_(1)
        return outputs

    # expect: clean
    def draft_single_step(self, batch):
        """1-step draft: draft_forward only samples, nothing to plan."""
        forward_batch, can_graph, _ = prepare_for_draft(
            batch.spec_info,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            1,
        )
        if can_graph:
            return self.cuda_graph_runner.execute(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output


class ForkFrozenKVMTPDraftWorker(FrozenKVMTPDraftWorker):
    """Frozen-KV MTP drafter that runs the seed iteration eagerly."""

    # expect: SG106
    def draft_forward_seed(self, forward_batch: ForwardBatch):
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        spec_info = forward_batch.spec_info
        forward_batch.input_ids = spec_info.bonus_tokens
        self._set_positions(forward_batch)
        with self._target_kv_pool_view(forward_batch):
            return self.draft_model_runner.forward(forward_batch).logits_output


class ForkFrozenKVMTPDraftWorkerDP(FrozenKVMTPDraftWorker):
    """DP-attention variant: the frozen-KV plan is built on the padded batch."""

    # expect: clean
    def _init_frozen_kv_metadata(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self.draft_model_runner)
        forward_batch.seq_lens_sum = torch.sum(forward_batch.seq_lens).item()
        with self._frozen_kv_target_view(forward_batch):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    # expect: clean
    def draft_forward_seed(self, forward_batch: ForwardBatch):
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        spec_info = forward_batch.spec_info
        forward_batch.input_ids = spec_info.bonus_tokens
        self._set_positions(forward_batch)
        with self._target_kv_pool_view(forward_batch):
            return self.draft_model_runner.forward(forward_batch).logits_output


class ForkMultiLayerEagleDraftWorker(MultiLayerEagleDraftWorker):
    """Multi-layer EAGLE: each MTP layer has its own draft-extend backend."""

    # expect: SG106
    def run_draft_extend_chain(self, forward_batch: ForwardBatch):
        outputs = []
        for step, runner in enumerate(self.draft_runner_list):
            backend = self.draft_extend_attn_backend_list[step]
            if step == 0 or forward_batch.needs_forward_metadata_init():
                backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            outputs.append(runner.forward(forward_batch).logits_output)
        return outputs

    # expect: clean
    def run_draft_extend_chain_graph(self, forward_batch: ForwardBatch):
        runner = self.cuda_graph_runner_for_draft_extend
        if runner is not None and runner.can_run_graph(forward_batch):
            return runner.execute(forward_batch)
        # Eager: each runner plans its own (padded) batch.
        return [
            r.forward(forward_batch).logits_output for r in self.draft_runner_list
        ]


class DraftPlanner:
    """Out-of-forward planner with post-plan hooks, used by the fork's
    plan-stream scheduler (one instance per draft worker)."""

    _POST_PLAN_HOOKS: ClassVar[Dict[str, Callable[[ForwardBatch], None]]] = {
        "mark_ready": ForwardBatch.mark_forward_metadata_ready,
    }

    def __init__(self, model_runner, attn_backend):
        self.model_runner = model_runner
        self.attn_backend = attn_backend

    # expect: SG106
    def plan_and_run(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        for hook in self._POST_PLAN_HOOKS.values():
            hook(forward_batch)
        return self.model_runner.forward(forward_batch)


class ReplannableDraftPlanner(DraftPlanner):
    _POST_PLAN_HOOKS: ClassVar[Dict[str, Callable[[ForwardBatch], None]]] = {
        "mark_ready": mark_replannable,
    }

    # expect: clean
    def plan_and_run(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        for hook in self._POST_PLAN_HOOKS.values():
            hook(forward_batch)
        return self.model_runner.forward(forward_batch)


# expect: SG106
def run_with_mark_hook(model_runner, attn_backend, forward_batch: ForwardBatch):
    mark = lambda: forward_batch.mark_forward_metadata_ready()  # noqa: E731
    attn_backend.init_forward_metadata(forward_batch)
    mark()
    return model_runner.forward(forward_batch)


# expect: clean
def run_with_mark_hook_dp_aware(model_runner, attn_backend, forward_batch):
    if get_parallel().attn_dp_enabled:
        mark = lambda: None  # noqa: E731
    else:
        mark = lambda: forward_batch.mark_forward_metadata_ready()  # noqa: E731
    attn_backend.init_forward_metadata(forward_batch)
    mark()
    return model_runner.forward(forward_batch)


# expect: SG106
def run_draft_extend_per_config(model_runner, attn_backend, forward_batch):
    cfg = dataclasses.replace(DEFAULT_DRAFT_EXTEND_PLAN, mark_ready=True)
    if cfg.preplan:
        attn_backend.init_forward_metadata(forward_batch)
        mark_per_config(forward_batch, cfg)
    return model_runner.forward(forward_batch)


# expect: clean
def run_draft_extend_per_config_dp(model_runner, attn_backend, forward_batch):
    cfg = dataclasses.replace(DEFAULT_DRAFT_EXTEND_PLAN, replan_equivalent=True)
    if cfg.preplan:
        attn_backend.init_forward_metadata(forward_batch)
        mark_per_config(forward_batch, cfg)
    return model_runner.forward(forward_batch)
