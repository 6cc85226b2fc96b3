"""Standalone-draft experiments on the draft-extend step (DRAFT_EXTEND_V2)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg30.utils import plan_helpers as ph

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend


class LabStandaloneBase:
    def __init__(
        self,
        draft_runner: ModelRunner,
        draft_extend_attn_backend: "AttentionBackend",
        cuda_graph_runner_for_draft_extend=None,
    ):
        self.draft_runner = draft_runner
        self.draft_extend_attn_backend = draft_extend_attn_backend
        self.cuda_graph_runner_for_draft_extend = cuda_graph_runner_for_draft_extend

    def prepare(self, forward_batch: ForwardBatch) -> ForwardBatch:
        if not forward_batch.forward_mode.is_idle():
            self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return forward_batch

    def _graph_ok(self, forward_batch: ForwardBatch) -> bool:
        runner = self.cuda_graph_runner_for_draft_extend
        return bool(runner is not None and runner.can_run_graph(forward_batch))


class LabStandaloneWorker(LabStandaloneBase):
    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (StandaloneWorkerV2 draft extend); plan+mark in utils helper ph.preplan
    # expect: SG106
    def draft_extend(self, forward_batch: ForwardBatch, select_index: torch.Tensor):
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        forward_batch = ph.preplan(self.draft_extend_attn_backend, forward_batch)
        out = self.draft_runner.forward(forward_batch).logits_output
        out.next_token_logits = out.next_token_logits[select_index]
        return out

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (StandaloneWorkerV2); mark written as a raw forward_metadata_ready attribute
    # expect: SG106
    def draft_extend_flagged(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.forward_metadata_ready = True
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend + EAGLEWorkerV2 draft-extend dispatch; eager arm plans+marks pre-pad
    # expect: SG106
    def draft_extend_graph_or_eager(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ):
        if self._graph_ok(forward_batch):
            return self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        if not forward_batch.forward_mode.is_idle():
            self.draft_extend_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        out = self.draft_runner.forward(forward_batch).logits_output
        out.next_token_logits = out.next_token_logits[select_index]
        if out.hidden_states is not None:
            out.hidden_states = out.hidden_states[select_index]
        return out

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (NPU arm); eager arm leaves planning to the forward
    # expect: clean
    def draft_extend_let_forward(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ):
        if self._graph_ok(forward_batch):
            return self.cuda_graph_runner_for_draft_extend.execute(
                forward_batch, select_index
            )
        out = self.draft_runner.forward(forward_batch).logits_output
        out.next_token_logits = out.next_token_logits[select_index]
        return out

    # idiom: speculative/standalone_worker_v2.py StandaloneWorkerV2 over EAGLEWorkerV2.draft; subclass run() plans through super().prepare (plan+mark) then forwards
    # expect: SG106
    def run(self, forward_batch: ForwardBatch):
        forward_batch = super().prepare(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: model_executor/model_runner.py ModelRunner._forward_raw inlined; pad by hand first, plan+mark the padded batch, eager execute, unpad
    # expect: clean
    def draft_extend_post_pad_plan(self, forward_batch: ForwardBatch):
        mr = self.draft_runner
        needs_unpad = ph.dp_pad(mr, forward_batch)
        if not forward_batch.forward_mode.is_idle():
            mr.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return ph.run_eager(mr, forward_batch, needs_unpad)
