"""Planning helpers shared by the MTP draft workers.

A draft batch is either planned by the worker ahead of the model runner's
forward (and marked so the forward does not plan it again) or left for the
forward to plan. The helpers here do the first; the module-level runners at
the bottom are the small "plan, then forward" entry points the workers and
the n-gram fallback call.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils.common import require_mlp_sync

logger = logging.getLogger(__name__)


def dp_attention_active() -> bool:
    return get_parallel().attn_dp_enabled


def forward_will_pad(forward_batch: ForwardBatch) -> bool:
    """The model runner pads a batch for MLP sync iff it carries the
    per-rank token counts."""
    return forward_batch.global_num_tokens_cpu is not None


def refresh_seq_lens_sum(forward_batch: ForwardBatch) -> None:
    if forward_batch.seq_lens_cpu is not None:
        forward_batch.seq_lens_sum = int(forward_batch.seq_lens_cpu.sum().item())
    else:
        forward_batch.seq_lens_sum = int(torch.sum(forward_batch.seq_lens).item())


def plan_only(backend: Any, forward_batch: ForwardBatch) -> ForwardBatch:
    backend.init_forward_metadata(forward_batch)
    return forward_batch


def plan_and_mark(
    backend: Any, forward_batch: ForwardBatch, *, replan_equivalent: bool = False
) -> ForwardBatch:
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return forward_batch


def mode_name(mode: ForwardMode) -> str:
    return mode.name.lower()


def logits_of(output: Any) -> Any:
    return getattr(output, "logits_output", output)


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft (non-graph branch); pre-plans a draft-decode batch on the draft backend, marks it, runs the draft runner
# expect: SG106
def run_preplanned_decode(
    runner: Any, backend: Any, forward_batch: ForwardBatch
) -> Any:
    assert forward_batch.forward_mode.is_decode(), forward_batch.forward_mode
    refresh_seq_lens_sum(forward_batch)
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return logits_of(runner.forward(forward_batch))


# idiom: speculative/eagle_utils.py eagle_prepare_for_verify + eagle_worker_common.run_eagle_verify; plans and marks a TARGET_VERIFY batch, then the target runner forwards it
# expect: clean
def run_preplanned_verify(
    runner: Any, backend: Any, forward_batch: ForwardBatch
) -> Any:
    if not forward_batch.forward_mode.is_target_verify():
        raise ValueError(
            f"run_preplanned_verify expects TARGET_VERIFY, got {forward_batch.forward_mode}"
        )
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return logits_of(runner.forward(forward_batch))


# idiom: model_executor/forward_batch_info.py prepare_mlp_sync_batch called ahead of the plan; pads for DP first, then plans and marks the padded draft-decode batch
# expect: clean
def run_prepadded_decode(
    runner: Any, backend: Any, forward_batch: ForwardBatch
) -> Any:
    if forward_will_pad(forward_batch):
        # Pad for MLP sync here so the plan below sees the final shapes; the
        # runner's own pass is then a no-op re-pad to the same size.
        forward_batch.prepare_mlp_sync_batch(runner)
    refresh_seq_lens_sum(forward_batch)
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return logits_of(runner.forward(forward_batch))


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft with a require_mlp_sync refusal in front; pre-plans only when DP attention / MLP sync is off
# expect: clean
def run_guarded_decode(
    runner: Any, backend: Any, forward_batch: ForwardBatch
) -> Any:
    if require_mlp_sync():
        raise NotImplementedError(
            "pre-planned MTP draft decode does not support DP attention / MLP "
            "sync; launch without --enable-dp-attention or use the graph path"
        )
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return logits_of(runner.forward(forward_batch))
