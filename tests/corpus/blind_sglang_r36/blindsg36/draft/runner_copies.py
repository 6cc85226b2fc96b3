"""Small copies of SGLang runner / worker functions, modified in place for the
lab's overlap experiments (plan on the host while the DP all-gather runs,
plan-stream pre-planning, multi-layer MTP, frozen-KV MTP).
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, List, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.model_executor.model_runner import ModelRunner, ModelRunnerOutput
from sglang.srt.runtime_context import get_model, get_parallel, get_server_args
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import MultiLayerEagleDraftWorker
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.common import fast_topk

from .config import SPEC_CFG, log_plan

LAB_RUNNER_CFG: Dict[str, Any] = {"early_plan": True, "plan_stream": None}


class LabModelRunner(ModelRunner):
    """ModelRunner with a few alternative forward bodies selectable by name."""

    def _graph_or_none(self, forward_batch: ForwardBatch, pp_proxy_tensors):
        can_run_graph = bool(
            forward_batch.forward_mode.is_cuda_graph()
            and self.decode_cuda_graph_runner
            and self.decode_cuda_graph_runner.can_run_graph(forward_batch)
        )
        if not can_run_graph:
            return None
        ret = self.decode_cuda_graph_runner.execute(
            forward_batch, pp_proxy_tensors=pp_proxy_tensors
        )
        return ModelRunnerOutput(logits_output=ret, can_run_graph=True)

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._forward_raw
    # expect: SG106
    def _forward_raw_overlap(self, forward_batch: ForwardBatch, pp_proxy_tensors=None):
        with (
            get_model().override(shared_experts=self.model.shared_experts_config),
            forward_context(
                ForwardContext(attn_backend=self.attn_backend), forward_batch=forward_batch
            ),
        ):
            graph_out = self._graph_or_none(forward_batch, pp_proxy_tensors)
            if graph_out is not None:
                return graph_out
            # Lab: plan on the host before the MLP-sync gather so the plan
            # overlaps the collective instead of following it.
            if (
                LAB_RUNNER_CFG["early_plan"]
                and not forward_batch.forward_mode.is_idle()
                and forward_batch.needs_forward_metadata_init()
            ):
                self.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            self._prepare_eager_forward_batch(forward_batch)
            ret = self.eager_runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
            if forward_batch.global_num_tokens_cpu is not None and self.pp_group.is_last_rank:
                forward_batch.post_forward_mlp_sync_batch(ret)
            return ModelRunnerOutput(logits_output=ret, can_run_graph=False)

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._forward_raw
    # expect: clean
    def _forward_raw_overlap_v2(self, forward_batch: ForwardBatch, pp_proxy_tensors=None):
        with (
            get_model().override(shared_experts=self.model.shared_experts_config),
            forward_context(
                ForwardContext(attn_backend=self.attn_backend), forward_batch=forward_batch
            ),
        ):
            graph_out = self._graph_or_none(forward_batch, pp_proxy_tensors)
            if graph_out is not None:
                return graph_out
            self._prepare_eager_forward_batch(forward_batch)
            # Plan once on the final (padded) shapes and record them, so the
            # eager runner below skips its own plan.
            if (
                LAB_RUNNER_CFG["early_plan"]
                and not forward_batch.forward_mode.is_idle()
                and forward_batch.needs_forward_metadata_init()
            ):
                self.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            ret = self.eager_runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
            if forward_batch.global_num_tokens_cpu is not None and self.pp_group.is_last_rank:
                forward_batch.post_forward_mlp_sync_batch(ret)
            return ModelRunnerOutput(logits_output=ret, can_run_graph=False)

    # idiom: sglang/srt/speculative/eagle_utils.py eagle_prepare_for_verify (plan-stream pre-plan)
    # expect: SG106
    def forward_with_plan_stream_v2(self, forward_batch: ForwardBatch, plan_stream=None):
        plan_stream = plan_stream or LAB_RUNNER_CFG["plan_stream"]
        ctx = torch.cuda.stream(plan_stream) if plan_stream is not None else contextlib.nullcontext()
        if not forward_batch.forward_mode.is_idle():
            if plan_stream is not None:
                plan_stream.wait_stream(torch.cuda.current_stream())
            with ctx:
                self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            if plan_stream is not None:
                torch.cuda.current_stream().wait_stream(plan_stream)
        return self.forward(forward_batch)

    # idiom: sglang/srt/speculative/eagle_utils.py eagle_prepare_for_verify (plan-stream pre-plan)
    # expect: clean
    def forward_with_plan_stream(self, forward_batch: ForwardBatch, plan_stream=None):
        plan_stream = plan_stream or LAB_RUNNER_CFG["plan_stream"]
        ctx = torch.cuda.stream(plan_stream) if plan_stream is not None else contextlib.nullcontext()
        graph = self.decode_cuda_graph_runner
        can_run_graph = bool(
            forward_batch.forward_mode.is_cuda_graph()
            and graph is not None
            and graph.can_run_graph(forward_batch)
        )
        if can_run_graph:
            # Graph replay pads inside its static buffers; the eager
            # prepare_mlp_sync_batch never runs for this batch.
            if plan_stream is not None:
                plan_stream.wait_stream(torch.cuda.current_stream())
            with ctx:
                graph.load_batch(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            if plan_stream is not None:
                torch.cuda.current_stream().wait_stream(plan_stream)
        return self.forward(forward_batch)


class MultiLayerLabWorker(MultiLayerEagleDraftWorker):
    """Multi-layer MTP draft extend, one de-tied runner per step."""

    def _steps_forward(self, forward_batch: ForwardBatch, mark: bool):
        outs = []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                if mark:
                    forward_batch.mark_forward_metadata_ready()
            outs.append(runner.forward(forward_batch).logits_output)
        return outs

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode
    # expect: SG106
    def draft_extend_mtp_v2(self, forward_batch: ForwardBatch):
        if get_server_args().enable_dp_attention and SPEC_CFG.get("mtp_mark_steps", True):
            raise NotImplementedError(
                "marked multi-layer MTP draft extend does not support DP attention"
            )
        outs = []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            outs.append(runner.forward(forward_batch).logits_output)
        return outs

    # idiom: sglang/srt/speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode
    # expect: clean
    def draft_extend_mtp(self, forward_batch: ForwardBatch):
        # As upstream: each de-tied runner's backend is pre-planned pre-pad,
        # but the batch is left unmarked, so every step's forward plans
        # again after prepare_mlp_sync_batch.
        return self._steps_forward(forward_batch, mark=False)


class FrozenLabDraft(FrozenKVMTPDraftWorker):
    """Frozen-KV MTP draft with the lab's greedy seed."""

    def _seed_inputs(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        if self.topk > 1:
            return (
                spec_info.bonus_tokens.repeat_interleave(self.topk, dim=0),
                spec_info.hidden_states.repeat_interleave(self.topk, dim=0),
            )
        return spec_info.bonus_tokens, spec_info.hidden_states

    def _run_seed(self, forward_batch: ForwardBatch):
        seed_ids, seed_hidden = self._seed_inputs(forward_batch)
        forward_batch.input_ids = seed_ids
        forward_batch.spec_info.hidden_states = seed_hidden
        self._set_positions(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            return self.draft_model_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward
    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch):
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        seed_output = self._run_seed(forward_batch)
        logits = seed_output.next_token_logits[:: self.topk] if self.topk > 1 else seed_output.next_token_logits
        topk_p, topk_index = fast_topk(torch.softmax(logits, dim=-1), self.topk, dim=-1)
        return topk_p, topk_index, seed_output.hidden_states

    # idiom: sglang/srt/speculative/frozen_kv_mtp_worker_v2.py FrozenKVMTPDraftWorker.draft_forward
    # expect: clean
    def draft_forward_alt(self, forward_batch: ForwardBatch):
        if forward_batch.global_num_tokens_cpu is not None:
            # The frozen-KV plan is a view-context plan: it cannot opt into a
            # post-pad re-plan and DP padding would reshape it.
            raise NotImplementedError(
                "FrozenLabDraft eager draft under DP attention / MLP sync is not supported"
            )
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        seed_output = self._run_seed(forward_batch)
        logits = seed_output.next_token_logits[:: self.topk] if self.topk > 1 else seed_output.next_token_logits
        topk_p, topk_index = fast_topk(torch.softmax(logits, dim=-1), self.topk, dim=-1)
        return topk_p, topk_index, seed_output.hidden_states
