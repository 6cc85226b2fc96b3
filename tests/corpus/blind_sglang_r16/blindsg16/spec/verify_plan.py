# Copyright 2023-2026 SGLang Team
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# ==============================================================================
"""Target-side staging for verify / decode batches.

The stage loads a batch into the decode CUDA graph's static buffers ahead of
the forward (on the plan stream when one exists), so the replay only has to
launch the graph.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Optional, Tuple

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner, ModelRunnerOutput
    from sglang.srt.speculative.eagle_info import EagleVerifyInput


def _init_verify_forward_batch(
    batch: ScheduleBatch, model_runner: ModelRunner, verify_input: EagleVerifyInput
) -> ForwardBatch:
    batch.forward_mode = (
        ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.TARGET_VERIFY
    )
    batch.spec_info = verify_input
    return ForwardBatch.init_new(
        batch,
        model_runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_hidden_states_before_norm=False,
        kv_loc_plan=verify_input.kv_loc_plan,
    )


# expect: clean
def run_target_verify(
    batch: ScheduleBatch,
    model_runner: ModelRunner,
    verify_input: EagleVerifyInput,
    plan_stream_ctx: Optional[contextlib.AbstractContextManager] = None,
) -> Tuple[ModelRunnerOutput, bool]:
    with plan_stream_ctx or contextlib.nullcontext():
        forward_batch = _init_verify_forward_batch(batch, model_runner, verify_input)
        can_run_cuda_graph = bool(
            model_runner.decode_cuda_graph_runner
            and model_runner.decode_cuda_graph_runner.can_run_graph(forward_batch)
        )
        if can_run_cuda_graph:
            model_runner.decode_cuda_graph_runner.load_batch(forward_batch)
            forward_batch.mark_forward_metadata_ready()
    out = model_runner.forward(forward_batch)
    return out, can_run_cuda_graph


class DecodeStage:
    """Stages plain decode batches for a target ModelRunner."""

    def __init__(self, model_runner: ModelRunner):
        self.model_runner = model_runner
        self._graph_runner = model_runner.decode_cuda_graph_runner
        self._can_graph = False

    def stage(self, forward_batch: ForwardBatch) -> None:
        self._can_graph = bool(
            self._graph_runner is not None
            and forward_batch.forward_mode.is_decode()
            and self._graph_runner.can_run_graph(forward_batch)
        )

    # expect: clean
    def run(self, forward_batch: ForwardBatch) -> ModelRunnerOutput:
        self.stage(forward_batch)
        if self._can_graph:
            self._graph_runner.load_batch(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.model_runner.forward(forward_batch)

    # expect: SG106
    def run_planned(self, forward_batch: ForwardBatch) -> ModelRunnerOutput:
        self.stage(forward_batch)
        if self._can_graph:
            self._graph_runner.load_batch(forward_batch)
        elif forward_batch.forward_mode.is_decode():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.model_runner.forward(forward_batch)
