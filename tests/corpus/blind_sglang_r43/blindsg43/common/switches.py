"""Deployment switches read by the fork's workers and backends.

Everything here is a thin view over SGLang's published configuration
(``runtime_context``), its env registry and the raw ``ServerArgs``.
"""

from __future__ import annotations

from typing import Tuple

from sglang.srt.environ import envs
from sglang.srt.runtime_context import get_parallel, get_server_args, get_spec
from sglang.srt.utils import get_bool_env_var, require_mlp_sync


def mlp_sync_required() -> bool:
    """True when the scheduler stamps ``global_num_tokens`` on every batch."""
    return require_mlp_sync()


def draft_preplan_enabled() -> bool:
    """Whether eager draft batches are planned ahead of the forward call."""
    return get_bool_env_var("SGLANG_FORK_DRAFT_PREPLAN", "true")


def eager_input_no_copy() -> bool:
    return envs.SGLANG_EAGER_INPUT_NO_COPY.get()


def legacy_dp_attention_flag() -> bool:
    """The operator's ``--enable-dp-attention`` as stored on ``ServerArgs``."""
    return bool(get_server_args().enable_dp_attention)


def dcp_geometry() -> Tuple[int, int]:
    """(world, rank) of the decode-context-parallel group, (1, 0) when off."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return 1, 0
    return parallel.dcp_size, parallel.dcp_rank


def num_draft_tokens() -> int:
    return int(get_spec().speculative_num_draft_tokens)
