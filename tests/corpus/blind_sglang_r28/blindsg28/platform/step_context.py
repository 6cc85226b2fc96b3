"""Per-step state carried between the overlap scheduler's phases."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg28.platform.planning import graph_can_run


@dataclass
class StepContext:
    forward_batch: ForwardBatch
    runner: ModelRunner
    attn_backend: Any
    use_graph: bool = False
    planned: bool = False
    step_id: int = 0
    extras: Dict[str, Any] = field(default_factory=dict)


def make_step_context(
    runner: ModelRunner,
    forward_batch: ForwardBatch,
    *,
    attn_backend: Optional[Any] = None,
    step_id: int = 0,
) -> StepContext:
    return StepContext(
        forward_batch=forward_batch,
        runner=runner,
        attn_backend=attn_backend if attn_backend is not None else runner.attn_backend,
        use_graph=graph_can_run(runner, forward_batch),
        step_id=step_id,
    )
