"""Where the DCP world size / rank come from (several places on purpose)."""

from __future__ import annotations

from typing import Tuple

from sglang.srt.distributed.parallel_state import (
    get_dcp_group,
    get_dcp_rank,
    get_dcp_world_size,
)
from sglang.srt.runtime_context import get_parallel
from sglang.srt.server_args import ServerArgs


def dcp_from_parallel() -> Tuple[int, int]:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return 1, 0
    return parallel.dcp_size, parallel.dcp_rank


def dcp_from_attn_parallel() -> Tuple[int, int]:
    parallel = get_parallel()
    return parallel.attn_dcp_size, parallel.attn_dcp_rank


def dcp_from_group() -> Tuple[int, int]:
    group = get_dcp_group()
    return group.world_size, group.rank_in_group


def dcp_from_parallel_state() -> Tuple[int, int]:
    return get_dcp_world_size(), get_dcp_rank()


def dcp_size_from_server_args(server_args: ServerArgs) -> int:
    return int(server_args.dcp_size)
