"""DP-attention / MLP-sync predicates, read from the published runtime context."""

from __future__ import annotations

from sglang.srt.runtime_context import get_parallel, get_server_args
from sglang.srt.utils.common import require_mlp_sync


def dp_attention_enabled() -> bool:
    """True when attention runs data-parallel (``--enable-dp-attention``)."""
    return get_parallel().attn_dp_enabled


def mlp_sync_required() -> bool:
    """True when ModelRunner will run ``prepare_mlp_sync_batch`` on eager batches."""
    return require_mlp_sync()


def dp_lm_head_enabled() -> bool:
    return bool(getattr(get_server_args(), "enable_dp_lm_head", False))
