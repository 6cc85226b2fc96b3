"""Replay-or-eager wrappers used by the fork's decode and draft-extend loops."""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import (
    EAGLEDraftExtendCudaGraphRunner,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft_extend


class DecodeReplayOrEager:
    """Replays the decode graph when it can, else runs the batch eagerly with
    a host-side plan."""

    def __init__(self, model_runner: ModelRunner):
        self.model_runner = model_runner
        self.num_eager = 0

    @property
    def _backend(self):
        return self.model_runner.attn_backend

    @property
    def _graph_runner(self):
        return self.model_runner.decode_cuda_graph_runner

    # expect: SG106
    def run(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        graph_runner = self._graph_runner
        if graph_runner is not None and graph_runner.can_run_graph(forward_batch):
            return self.model_runner.forward(forward_batch).logits_output

        self.num_eager += 1
        if not forward_batch.forward_mode.is_idle():
            self._backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.model_runner.forward(forward_batch).logits_output


class CapturedDraftExtendRunner:
    """Draft-extend driver around the stock draft-extend graph runner."""

    def __init__(
        self,
        draft_runner: ModelRunner,
        graph_runner: Optional[EAGLEDraftExtendCudaGraphRunner],
        num_draft_tokens: int,
    ):
        self.draft_runner = draft_runner
        self.graph_runner = graph_runner
        self.num_draft_tokens = num_draft_tokens

    # expect: clean
    def run(
        self,
        batch: ScheduleBatch,
        draft_extend_input: EagleDraftExtendInput,
        next_token_ids: torch.Tensor,
        select_index: torch.Tensor,
    ) -> LogitsProcessorOutput:
        forward_batch = prepare_for_draft_extend(
            draft_extend_input,
            batch,
            next_token_ids,
            self.num_draft_tokens,
            self.draft_runner,
            self.graph_runner,
            return_hidden_states_before_norm=False,
        )
        if self.graph_runner is not None and self.graph_runner.can_run_graph(
            forward_batch
        ):
            return self.graph_runner.execute(forward_batch, select_index)

        # Eager fallback: drop the helper's pre-pad plan marker so the
        # runner plans the batch it actually runs.
        forward_batch.forward_metadata_ready = False
        out = self.draft_runner.forward(forward_batch).logits_output
        out.next_token_logits = out.next_token_logits[select_index]
        if out.hidden_states is not None:
            out.hidden_states = out.hidden_states[select_index]
        return out


class EagerDecodeShortcut:
    """Runs a decode batch straight through the eager runner, skipping the
    ModelRunner.forward bookkeeping (expert recorder, canary, EPLB)."""

    def __init__(self, model_runner: ModelRunner):
        self.model_runner = model_runner

    # expect: SG106
    def run(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        mr = self.model_runner
        mr.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(mr)
        ret = mr.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret
