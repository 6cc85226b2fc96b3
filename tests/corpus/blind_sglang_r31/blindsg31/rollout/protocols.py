"""Structural interfaces the rollout engine programs against.

The engine never imports a concrete SGLang worker type in its hot loop; it
types against these protocols so the same code drives the EAGLE v2 draft
worker, the multi-layer MTP worker and the frozen-KV MTP worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Protocol, runtime_checkable

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch
    from sglang.srt.model_executor.model_runner import ModelRunnerOutput


@runtime_checkable
class AttnPlanner(Protocol):
    """Anything with SGLang's attention-backend planning entry point."""

    def init_forward_metadata(self, forward_batch: "ForwardBatch") -> None: ...


@runtime_checkable
class ForwardRunner(Protocol):
    """``ModelRunner``-shaped: pads for DP attention, then runs the batch."""

    def forward(
        self,
        forward_batch: "ForwardBatch",
        skip_attn_backend_init: Optional[bool] = None,
        pp_proxy_tensors: Any = None,
    ) -> "ModelRunnerOutput": ...


class DraftWorkerLike(Protocol):
    draft_runner: Any
    draft_attn_backend: Any
    topk: int
    speculative_num_steps: int
    speculative_num_draft_tokens: int

    def draft(self, batch: "ScheduleBatch"): ...


class WeightSyncHook(Protocol):
    """Called by the trainer after each policy-weight broadcast."""

    def after_update(self, worker: Any, warm_batch: "ScheduleBatch") -> Any: ...


class BatchStage(Protocol):
    """One step of a batch pipeline: takes a ForwardBatch, returns one."""

    def __call__(self, forward_batch: "ForwardBatch") -> Any: ...
