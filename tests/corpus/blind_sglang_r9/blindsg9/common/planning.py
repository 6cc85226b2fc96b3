"""Small planning helpers shared by the fork's speculative workers."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sglang.srt.layers.dp_attention import is_dp_attention_enabled
from sglang.srt.runtime_context import get_parallel

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def preplan_and_mark(
    attn_backend: "AttentionBackend", forward_batch: "ForwardBatch"
) -> "ForwardBatch":
    """Plan attention metadata out of the forward and tell the runner so."""
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return forward_batch


def preplan_replannable(
    attn_backend: "AttentionBackend", forward_batch: "ForwardBatch"
) -> "ForwardBatch":
    """Plan out of the forward; the forward may re-plan if DP padding reshapes
    the batch (same backend object, so the re-plan is equivalent)."""
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
    return forward_batch


def dp_attention_active() -> bool:
    return get_parallel().attn_dp_size > 1


def preplan_allowed_by_env() -> bool:
    return os.environ.get("SGLANG_FORK_PREPLAN_DRAFT_EXTEND", "1") == "1"


def preplan_allowed() -> bool:
    """Pre-planning is only safe when nothing pads the batch afterwards."""
    return preplan_allowed_by_env() and not is_dp_attention_enabled()
