"""Out-of-forward attention planning helpers.

Upstream SGLang lets a pre-planner (multi-step draft, plan-stream load_batch,
hand-built speculative batches) plan a ForwardBatch outside
``ModelRunner.forward`` and record that on the batch with
``ForwardBatch.mark_forward_metadata_ready``.  The helpers below bundle the
plan and the mark the way the fork's workers use them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, List, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    from sglang.srt.model_executor.model_runner import ModelRunner


def plan_and_mark(
    attn_backend: "AttentionBackend",
    forward_batch: ForwardBatch,
    *,
    replan_equivalent: bool = False,
) -> ForwardBatch:
    """Plan ``forward_batch`` on ``attn_backend`` and record the plan."""
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return forward_batch


def pad_for_mlp_sync(forward_batch: ForwardBatch, model_runner: "ModelRunner") -> int:
    """Apply the DP-attention / MLP-sync padding now instead of inside forward.

    Returns the real (pre-pad) batch size so callers can slice outputs back.
    ``prepare_mlp_sync_batch`` is shape-idempotent, so the second call made by
    ``ModelRunner.forward`` leaves the batch as padded here.
    """
    real_bs = forward_batch.batch_size
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.prepare_mlp_sync_batch(model_runner)
    return real_bs


@contextlib.contextmanager
def preplanned(
    attn_backend: "AttentionBackend", forward_batch: ForwardBatch
) -> Iterator[ForwardBatch]:
    """Plan + mark on entry; the body runs the forwards."""
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    yield forward_batch


@contextlib.contextmanager
def padded_preplan(
    attn_backend: "AttentionBackend",
    forward_batch: ForwardBatch,
    model_runner: "ModelRunner",
) -> Iterator[int]:
    """Pad for MLP sync, then plan + mark on the padded batch.

    Yields the real batch size.
    """
    real_bs = pad_for_mlp_sync(forward_batch, model_runner)
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    yield real_bs


@dataclass
class DraftStepPlan:
    """A pending out-of-forward plan for one draft batch."""

    forward_batch: ForwardBatch
    attn_backend: "AttentionBackend"
    replan_equivalent: bool = False
    committed: bool = False

    def commit(self) -> ForwardBatch:
        self.attn_backend.init_forward_metadata(self.forward_batch)
        self.forward_batch.mark_forward_metadata_ready(
            replan_equivalent=self.replan_equivalent
        )
        self.committed = True
        return self.forward_batch


class DraftStepPlanner:
    """Stateful planner a worker keeps for its draft backend.

    Tracks how many batches it pre-planned (exported as a metric by the
    fork's scheduler hooks).
    """

    def __init__(self, attn_backend: "AttentionBackend", *, replan_equivalent: bool):
        self.attn_backend = attn_backend
        self.replan_equivalent = replan_equivalent
        self.num_preplanned = 0

    def prepare(self, forward_batch: ForwardBatch) -> ForwardBatch:
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=self.replan_equivalent
        )
        self.num_preplanned += 1
        return forward_batch


def split_rows(forward_batch: ForwardBatch, max_rows: int) -> List[slice]:
    """Row slices of at most ``max_rows`` requests (one slice if ``max_rows`` <= 0)."""
    bs = forward_batch.batch_size
    if max_rows <= 0 or bs <= max_rows:
        return [slice(0, bs)]
    return [slice(s, min(s + max_rows, bs)) for s in range(0, bs, max_rows)]


def batch_will_pad(forward_batch: ForwardBatch) -> bool:
    """True when ModelRunner.forward will run prepare_mlp_sync_batch on it."""
    return forward_batch.global_num_tokens_cpu is not None


def clear_forward_metadata_mark(forward_batch: ForwardBatch) -> None:
    forward_batch.forward_metadata_ready = False
    forward_batch.forward_metadata_planned_bs = None
    forward_batch.forward_metadata_planned_num_tokens = None
    forward_batch.forward_metadata_replan_equivalent = False


def maybe_real_rows(tensor: Optional["object"], real_bs: int):
    if tensor is None:
        return None
    return tensor[:real_bs]
