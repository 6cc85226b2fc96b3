"""Planning helpers shared by the forked speculative workers.

Everything here takes its state explicitly (backend, forward batch, runner)
and returns plain tuples / small records so the call sites can compose them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional, Tuple

from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils.common import require_mlp_sync

# Mark options, kept in one place so call sites can pick one by name.
MARK_OPTIONS: Dict[str, Dict[str, bool]] = {
    "pinned": {"replan_equivalent": False},
    "replannable": {"replan_equivalent": True},
}


def dp_attention_active() -> bool:
    """True when the model runner will run the MLP-sync (DP attention) pass."""
    return require_mlp_sync()


def attn_dp_enabled() -> bool:
    return get_parallel().attn_dp_enabled


def plan_and_mark(backend: Any, forward_batch: ForwardBatch, **mark_kwargs):
    """Plan ``forward_batch`` on ``backend`` and record the plan on the batch."""
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(**mark_kwargs)
    return forward_batch, True


def plan_only(backend: Any, forward_batch: ForwardBatch):
    backend.init_forward_metadata(forward_batch)
    return forward_batch, False


def plan_and_mark_unpadded(backend: Any, forward_batch: ForwardBatch):
    """Pre-plan, but only record the plan when no MLP-sync pass will follow."""
    backend.init_forward_metadata(forward_batch)
    if forward_batch.global_num_tokens_cpu is None:
        forward_batch.mark_forward_metadata_ready()
        return forward_batch, True
    return forward_batch, False


def pad_then_plan(
    model_runner: Any, backend: Any, forward_batch: ForwardBatch
) -> Tuple[ForwardBatch, bool]:
    """Run the DP padding first, then plan the padded batch and mark it."""
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(model_runner)
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return forward_batch, True


@dataclasses.dataclass
class PlannedBatch:
    """A forward batch together with how it was planned."""

    forward_batch: ForwardBatch
    backend: Any
    marked: bool = False
    replan_equivalent: bool = False

    @property
    def batch(self) -> ForwardBatch:
        return self.forward_batch


def planned(backend: Any, forward_batch: ForwardBatch, replan: bool = False):
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan)
    return PlannedBatch(forward_batch, backend, True, replan)


def planned_lazily(backend: Any, forward_batch: ForwardBatch):
    """Plan now; leave the batch unmarked so the forward plans the final shape."""
    backend.init_forward_metadata(forward_batch)
    return PlannedBatch(forward_batch, backend, False, False)


def new_draft_extend_batch(
    batch: Any,
    model_runner: Any,
    predict: Any,
    num_draft_tokens: int,
    *,
    mode: ForwardMode = ForwardMode.DRAFT_EXTEND_V2,
) -> ForwardBatch:
    """Fixed-window draft-extend batch (every request extends num_draft_tokens)."""
    bs = len(batch.seq_lens)
    batch.input_ids = predict
    batch.prefix_lens = batch.seq_lens_cpu.tolist()
    batch.extend_lens = [num_draft_tokens] * bs
    batch.extend_num_tokens = bs * num_draft_tokens
    batch.forward_mode = ForwardMode.IDLE if batch.forward_mode.is_idle() else mode
    forward_batch = ForwardBatch.init_new(
        batch,
        model_runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_hidden_states_before_norm=False,
    )
    forward_batch.seq_lens = forward_batch.seq_lens + num_draft_tokens
    forward_batch.seq_lens_cpu = forward_batch.seq_lens_cpu + num_draft_tokens
    forward_batch.seq_lens_sum = int(forward_batch.seq_lens_cpu.sum())
    return forward_batch


def run_forward(model_runner: Any, forward_batch: ForwardBatch, *args, **kwargs):
    """Thin forwarding wrapper around ModelRunner.forward."""
    return model_runner.forward(forward_batch, *args, **kwargs).logits_output


def compose(*steps: Callable) -> Callable:
    """Left-to-right composition of ``state -> state`` steps."""

    def _run(state):
        for step in steps:
            state = step(state)
        return state

    return _run


def maybe(value: Optional[Any], default: Any) -> Any:
    return default if value is None else value
