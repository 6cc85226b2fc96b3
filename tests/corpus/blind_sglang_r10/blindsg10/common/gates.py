"""Deployment gates: DP attention / MLP sync, DCP, and fork env flags."""

from __future__ import annotations

import os
from typing import Tuple

from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils.common import require_mlp_sync

_TRUTHY = {"1", "true", "yes", "on"}


def fork_flag(name: str, default: bool = False) -> bool:
    """Read a boolean fork flag from the environment (``SGLANG_FORK_*``)."""
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in _TRUTHY


def mlp_sync_padding_expected() -> bool:
    """Whether the scheduler attaches global token counts to batches, i.e.
    whether ModelRunner's eager path will run ``prepare_mlp_sync_batch``."""
    return require_mlp_sync()


def batch_will_be_dp_padded(forward_batch) -> bool:
    """Per-batch version of :func:`mlp_sync_padding_expected`."""
    return forward_batch.global_num_tokens_cpu is not None


def dcp_enabled() -> bool:
    return get_parallel().dcp_enabled


def dcp_world() -> Tuple[int, int]:
    """``(dcp_size, dcp_rank)``; ``(1, 0)`` when DCP is off."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return 1, 0
    return parallel.dcp_size, parallel.dcp_rank
