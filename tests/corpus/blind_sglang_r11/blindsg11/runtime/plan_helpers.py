"""Out-of-forward attention planning helpers for the speculative workers.

ModelRunner.forward plans attention itself unless the batch was marked with
``ForwardBatch.mark_forward_metadata_ready``; these helpers centralise the
places where we plan ahead of the forward (plan stream, multi-step draft
loops, hand-built spec batches).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Iterator

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.utils.common import require_mlp_sync

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


def preplan(
    attn_backend, forward_batch: ForwardBatch, *, replan_equivalent: bool = False
) -> bool:
    """Plan ``forward_batch`` on ``attn_backend`` and mark it planned."""
    if forward_batch.forward_mode.is_idle():
        return False
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return True


def preplan_if_unsynced(attn_backend, forward_batch: ForwardBatch) -> bool:
    """Pre-plan only when the forward will not pad the batch for MLP sync.

    With MLP sync (DP attention, gathered buffers) ModelRunner pads the batch
    inside forward; leave it unmarked there so the forward plans the padded
    batch itself.
    """
    if forward_batch.forward_mode.is_idle():
        return False
    if forward_batch.global_num_tokens_cpu is not None or require_mlp_sync():
        return False
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return True


def pad_for_mlp_sync(model_runner: "ModelRunner", forward_batch: ForwardBatch) -> bool:
    if forward_batch.global_num_tokens_cpu is None:
        return False
    forward_batch.prepare_mlp_sync_batch(model_runner)
    return True


@contextlib.contextmanager
def preplanned(attn_backend, forward_batch: ForwardBatch) -> Iterator[ForwardBatch]:
    """Plan once for a block of forwards over the same batch."""
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    yield forward_batch


@contextlib.contextmanager
def scoped_preplan(attn_backend, forward_batch: ForwardBatch) -> Iterator[ForwardBatch]:
    """Plan for an out-of-forward consumer (tree build, sampling peek).

    The mark is dropped on exit so a later ModelRunner.forward plans the
    batch it actually runs.
    """
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    try:
        yield forward_batch
    finally:
        forward_batch.forward_metadata_ready = False


# expect: SG106
def run_preplanned(model_runner: "ModelRunner", attn_backend, forward_batch: ForwardBatch):
    """Plan on ``attn_backend`` (which may differ from the runner's own), then
    run the runner's forward on the planned batch."""
    preplan(attn_backend, forward_batch)
    return model_runner.forward(forward_batch).logits_output


# expect: clean
def run_padded_then_planned(
    model_runner: "ModelRunner", attn_backend, forward_batch: ForwardBatch
):
    """Same as run_preplanned, but pad for MLP sync before planning and drive
    the eager runner directly (ModelRunner.forward would pad a second time)."""
    padded = pad_for_mlp_sync(model_runner, forward_batch)
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    out = model_runner.eager_runner.execute(forward_batch)
    if padded:
        forward_batch.post_forward_mlp_sync_batch(out)
    return out
