"""Frozen-KV and multi-layer draft experiments."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, List, Sequence

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.model_executor.model_runner import ModelRunner

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend


class FrozenDraftLab:
    def __init__(
        self,
        draft_runner: ModelRunner,
        draft_attn_backend: "AttentionBackend",
        step_backends: Sequence["AttentionBackend"],
        num_steps: int,
    ):
        self.draft_runner = draft_runner
        self.draft_attn_backend = draft_attn_backend
        self.step_backends = list(step_backends)
        self.num_steps = num_steps
        self._target_seq_lens = None

    @contextlib.contextmanager
    def _target_view(self, forward_batch: ForwardBatch):
        saved = forward_batch.seq_lens
        if self._target_seq_lens is not None:
            forward_batch.seq_lens = self._target_seq_lens
        try:
            yield forward_batch
        finally:
            forward_batch.seq_lens = saved

    def _init_meta(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        if forward_batch.seq_lens_cpu is not None:
            forward_batch.seq_lens_sum = int(forward_batch.seq_lens_cpu.sum().item())
        with self._target_view(forward_batch):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    # idiom: speculative/frozen_kv_mtp_worker_v2.py draft_forward; needs_forward_metadata_init gate -> _init_meta (plan under a view ctx + mark), then ModelRunner.forward
    # expect: SG106
    def draft_forward(self, forward_batch: ForwardBatch, seed_ids: torch.Tensor):
        if forward_batch.needs_forward_metadata_init():
            self._init_meta(forward_batch)
        forward_batch.input_ids = seed_ids
        with forward_context(
            ForwardContext(attn_backend=self.draft_attn_backend),
            forward_batch=forward_batch,
        ):
            seed = self.draft_runner.forward(forward_batch).logits_output
        return seed

    # idiom: speculative/multi_layer_eagle_worker_v2.py draft_forward; every step backend planned in a loop, one mark, per-step forwards under forward_context
    # expect: SG106
    def draft_multi_layer(self, forward_batch: ForwardBatch, step_ids: List[torch.Tensor]):
        if forward_batch.forward_mode.is_idle():
            return []
        for backend in self.step_backends:
            backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        outs = []
        for i in range(self.num_steps - 1):
            forward_batch.input_ids = step_ids[i]
            with forward_context(
                ForwardContext(attn_backend=self.step_backends[i]),
                forward_batch=forward_batch,
            ):
                outs.append(self.draft_runner.forward(forward_batch).logits_output)
        return outs
