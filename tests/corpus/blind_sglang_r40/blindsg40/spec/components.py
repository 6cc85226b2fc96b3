"""Planner / padder / runner parts that the step facades are composed of."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class MetadataPlanner:
    """Plans a backend's forward metadata outside ModelRunner.forward."""

    def __init__(self, attn_backend: Any):
        self.attn_backend = attn_backend

    def plan(self, forward_batch: ForwardBatch) -> None:
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    def plan_replannable(self, forward_batch: ForwardBatch) -> None:
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)

    def plan_only(self, forward_batch: ForwardBatch) -> None:
        self.attn_backend.init_forward_metadata(forward_batch)


class MlpSyncPadder:
    """Applies the DP-attention MLP-sync padding the way ModelRunner does."""

    def __init__(self, model_runner: Any):
        self.model_runner = model_runner

    def pad(self, forward_batch: ForwardBatch) -> bool:
        if forward_batch.global_num_tokens_cpu is None:
            return False
        forward_batch.prepare_mlp_sync_batch(self.model_runner)
        return True

    def unpad(self, forward_batch: ForwardBatch, logits_output: Any) -> Any:
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(logits_output)
        return logits_output


class EagerModelRunner:
    """Eager forward that consults the batch's planning state, like EagerRunner."""

    def __init__(self, model_runner: Any):
        self.model_runner = model_runner

    def run(self, forward_batch: ForwardBatch) -> Any:
        if forward_batch.needs_forward_metadata_init():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.model_runner.model.forward(
            forward_batch.input_ids, forward_batch.positions, forward_batch
        )


class ForwardingRunner:
    """Goes through ModelRunner.forward (MLP-sync padding happens inside)."""

    def __init__(self, model_runner: Any):
        self.model_runner = model_runner

    def run(self, forward_batch: ForwardBatch) -> Any:
        return self.model_runner.forward(forward_batch).logits_output


@dataclass
class PlannedDraft:
    forward_batch: ForwardBatch
    can_run_graph: bool
    replannable: bool = False


@contextlib.contextmanager
def plan_on_enter(attn_backend: Any, forward_batch: ForwardBatch):
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    yield forward_batch


@contextlib.contextmanager
def replannable_plan_on_enter(attn_backend: Any, forward_batch: ForwardBatch):
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    yield forward_batch


def plan_and_mark(attn_backend: Any, forward_batch: ForwardBatch, **mark_kwargs) -> None:
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(**mark_kwargs)


def graph_runner_can_run(graph_runner: Optional[Any], forward_batch: ForwardBatch) -> bool:
    return bool(graph_runner is not None and graph_runner.can_run_graph(forward_batch))
