"""Eager-forward helpers for batches the fork pads itself.

``ModelRunner.forward`` pads a DP-attention batch inside ``_forward_raw``
(``prepare_mlp_sync_batch``) and then lets the eager runner decide whether to
plan (``needs_forward_metadata_init``).  Some of our draft paths pad first, so
they need a forward that does not pad a second time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.utils.common import require_mlp_sync

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner


def dp_padding_expected() -> bool:
    """True when a forward of this worker will be padded for DP attention."""
    return require_mlp_sync()


def pad_for_dp(model_runner: "ModelRunner", forward_batch: ForwardBatch) -> bool:
    """Apply the MLP-sync padding ``_forward_raw`` would apply. Returns whether it ran."""
    if forward_batch.global_num_tokens_cpu is None:
        return False
    forward_batch.prepare_mlp_sync_batch(model_runner)
    return True


def _num_tokens(forward_batch: ForwardBatch) -> int:
    return forward_batch.input_ids.shape[0] if forward_batch.input_ids is not None else 0


def replan_if_padded(attn_backend, forward_batch: ForwardBatch) -> bool:
    """Re-plan a marked batch whose shapes moved since it was marked."""
    if not forward_batch.forward_metadata_ready:
        return False
    if (
        forward_batch.batch_size == forward_batch.forward_metadata_planned_bs
        and _num_tokens(forward_batch) == forward_batch.forward_metadata_planned_num_tokens
    ):
        return False
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return True


def forward_prepadded(
    model_runner: "ModelRunner",
    forward_batch: ForwardBatch,
    attn_backend=None,
):
    """Run an already padded batch through the eager runner (no second pad).

    The eager runner keeps its own planning decision: it plans iff
    ``forward_batch.needs_forward_metadata_init()`` (decode / draft extend).
    """
    ctx = ForwardContext(attn_backend=attn_backend or model_runner.attn_backend)
    with forward_context(ctx, forward_batch=forward_batch):
        ret = model_runner.eager_runner.execute(forward_batch)
    if forward_batch.global_num_tokens_cpu is not None and model_runner.pp_group.is_last_rank:
        forward_batch.post_forward_mlp_sync_batch(ret)
    return ret


def forward_padded_respecting_mark(model_runner: "ModelRunner", forward_batch: ForwardBatch):
    """Pad, plan only if the batch asks for it, run the model body."""
    pad_for_dp(model_runner, forward_batch)
    if forward_batch.needs_forward_metadata_init():
        model_runner.attn_backend.init_forward_metadata(forward_batch)
    with forward_context(
        ForwardContext(attn_backend=model_runner.attn_backend),
        forward_batch=forward_batch,
    ):
        ret = model_runner.model.forward(
            forward_batch.input_ids, forward_batch.positions, forward_batch
        )
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.post_forward_mlp_sync_batch(ret)
    return ret


def forward_draft_extend_eager(model_runner: "ModelRunner", forward_batch: ForwardBatch):
    """Pad, then always plan a draft extend on the padded batch.

    Same policy as ``EagerRunner._execute_extend`` applies to target verify:
    whatever was planned upstream, the final (padded) batch is planned again.
    """
    pad_for_dp(model_runner, forward_batch)
    if (
        forward_batch.needs_forward_metadata_init()
        or forward_batch.forward_mode.is_draft_extend_v2()
    ):
        model_runner.attn_backend.init_forward_metadata(forward_batch)
    with forward_context(
        ForwardContext(attn_backend=model_runner.attn_backend),
        forward_batch=forward_batch,
    ):
        ret = model_runner.model.forward(
            forward_batch.input_ids, forward_batch.positions, forward_batch
        )
    if forward_batch.global_num_tokens_cpu is not None:
        forward_batch.post_forward_mlp_sync_batch(ret)
    return ret


def restore_unplanned(forward_batch: ForwardBatch) -> None:
    """Drop a pre-plan mark so the forward path plans the final batch."""
    forward_batch.forward_metadata_ready = False
    forward_batch.forward_metadata_planned_bs: Optional[int] = None
    forward_batch.forward_metadata_planned_num_tokens = None
