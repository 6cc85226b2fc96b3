"""Draft strategies registered by name; each drives one draft algorithm's
decode and draft-extend forwards on top of a draft worker's parts."""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch

from sglang.srt.layers.dp_attention import is_dp_attention_enabled
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import (
    prepare_for_draft,
    prepare_for_draft_extend,
)

from blindsg40.config.settings import ParallelSettings, SpecSettings
from blindsg40.registry.core import DRAFT_STRATEGIES, register_draft_strategy
from blindsg40.spec.components import MlpSyncPadder


class _StrategyBase:
    def __init__(self, worker: Any, parallel: ParallelSettings, spec: SpecSettings):
        self.worker = worker
        self.parallel = parallel
        self.spec = spec
        self.draft_runner = worker.draft_runner
        self.draft_attn_backend = worker.draft_attn_backend
        self.cuda_graph_runner = worker.cuda_graph_runner
        self.cuda_graph_runner_for_draft_extend = worker.cuda_graph_runner_for_draft_extend

    @classmethod
    def from_server_args(cls, server_args, worker):
        return cls(
            worker,
            ParallelSettings.from_server_args(server_args),
            SpecSettings.from_server_args(server_args),
        )

    def _prepare(self, batch) -> Tuple[ForwardBatch, bool]:
        forward_batch, can_run_graph, _ = prepare_for_draft(
            batch.spec_info,
            self.worker.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.spec.topk,
            self.spec.num_steps,
        )
        return forward_batch, can_run_graph

    def _step_forward(self, forward_batch: ForwardBatch, step: int):
        with forward_context(
            ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[step]),
            forward_batch=forward_batch,
        ):
            return self.draft_runner.forward(forward_batch).logits_output


def build_strategy(name: str, server_args, worker):
    return DRAFT_STRATEGIES.get(name).from_server_args(server_args, worker)


@register_draft_strategy("eagle")
class EagleChainStrategy(_StrategyBase):
    def _prepare_planned(self, batch) -> Tuple[ForwardBatch, bool]:
        forward_batch, can_run_graph = self._prepare(batch)
        if not can_run_graph and not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return forward_batch, can_run_graph

    # expect: SG106
    def run_decode(self, batch):
        forward_batch, can_run_graph = self._prepare_planned(batch)
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)
        outputs: List[Any] = []
        for step in range(self.spec.num_steps - 1):
            outputs.append(self._step_forward(forward_batch, step))
        return outputs

    # expect: clean
    def run_decode_unpadded_only(self, batch):
        forward_batch, can_run_graph = self._prepare(batch)
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)
        if not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            if forward_batch.global_num_tokens_cpu is None:
                forward_batch.mark_forward_metadata_ready()
        outputs: List[Any] = []
        for step in range(self.spec.num_steps - 1):
            outputs.append(self._step_forward(forward_batch, step))
        return outputs


@register_draft_strategy("mtp")
class MtpStrategy(_StrategyBase):
    def _extend_input(self, batch_result) -> EagleDraftExtendInput:
        return EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=batch_result.accept_lens - 1,
            num_accept_tokens=batch_result.accept_lens,
            num_tokens_per_req=self.spec.num_draft_tokens,
            num_tokens_for_logprob_per_req=self.spec.num_draft_tokens,
        )

    def _prepare_extend(self, batch, batch_result, next_token_ids) -> ForwardBatch:
        return prepare_for_draft_extend(
            self._extend_input(batch_result),
            batch,
            next_token_ids,
            self.spec.num_draft_tokens,
            self.draft_runner,
            self.cuda_graph_runner_for_draft_extend,
            return_hidden_states_before_norm=False,
        )

    # expect: SG106
    def run_draft_extend(self, batch, batch_result, next_token_ids):
        forward_batch = self._prepare_extend(batch, batch_result, next_token_ids)
        graph = self.cuda_graph_runner_for_draft_extend
        if graph is not None and graph.can_run_graph(forward_batch):
            return graph.execute(forward_batch, None)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def run_draft_extend_replannable(self, batch, batch_result, next_token_ids):
        forward_batch = self._prepare_extend(batch, batch_result, next_token_ids)
        graph = self.cuda_graph_runner_for_draft_extend
        if graph is not None and graph.can_run_graph(forward_batch):
            return graph.execute(forward_batch, None)
        if not forward_batch.forward_mode.is_idle():
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def run_draft_extend_dp_reset(self, batch, batch_result, next_token_ids):
        forward_batch = self._prepare_extend(batch, batch_result, next_token_ids)
        graph = self.cuda_graph_runner_for_draft_extend
        if graph is not None and graph.can_run_graph(forward_batch):
            return graph.execute(forward_batch, None)
        if self.parallel.enable_dp_attention:
            forward_batch.forward_metadata_ready = False
        return self.draft_runner.forward(forward_batch).logits_output


@register_draft_strategy("standalone")
class StandaloneStrategy(_StrategyBase):
    def _idle(self, forward_batch: ForwardBatch):
        for step in range(self.spec.num_steps - 1):
            self._step_forward(forward_batch, step)
        return None

    # expect: SG106
    def run_decode(self, batch):
        forward_batch, can_run_graph = self._prepare(batch)
        if forward_batch.forward_mode.is_idle():
            return self._idle(forward_batch)
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return [
            self._step_forward(forward_batch, step)
            for step in range(self.spec.num_steps - 1)
        ]

    # expect: clean
    def run_decode_dp_routed(self, batch):
        forward_batch, can_run_graph = self._prepare(batch)
        if forward_batch.forward_mode.is_idle():
            return self._idle(forward_batch)
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)
        if is_dp_attention_enabled():
            return self._run_padded_first(forward_batch)
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return [
            self._step_forward(forward_batch, step)
            for step in range(self.spec.num_steps - 1)
        ]

    def _run_padded_first(self, forward_batch: ForwardBatch):
        MlpSyncPadder(self.draft_runner).pad(forward_batch)
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        outputs = []
        for step in range(self.spec.num_steps - 1):
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[step]),
                forward_batch=forward_batch,
            ):
                outputs.append(
                    self.draft_runner.model.forward(
                        forward_batch.input_ids, forward_batch.positions, forward_batch
                    )
                )
        return outputs


@register_draft_strategy("multi_layer_eagle")
class MultiLayerStrategy(_StrategyBase):
    # expect: SG106
    def run_decode(self, batch):
        forward_batch, can_run_graph = self._prepare(batch)
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)
        if forward_batch.forward_mode.is_idle():
            return None
        multi_step_backend = self.draft_attn_backend
        multi_step_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        results = []
        for step, backend in enumerate(multi_step_backend.attn_backends[: self.spec.num_steps - 1]):
            with forward_context(ForwardContext(attn_backend=backend), forward_batch=forward_batch):
                results.append(self.draft_runner.forward(forward_batch).logits_output)
        return results

    # expect: clean
    def run_decode_captured(self, batch):
        forward_batch, can_run_graph = self._prepare(batch)
        if forward_batch.forward_mode.is_idle():
            return None
        if not can_run_graph:
            raise RuntimeError(
                "multi-layer draft decode is only served from its captured graph"
            )
        return self.cuda_graph_runner.execute(forward_batch)
