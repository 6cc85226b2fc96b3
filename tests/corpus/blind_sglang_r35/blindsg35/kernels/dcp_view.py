"""Where the DCP width and rank come from: the runtime parallel context, the
server args, or the DCP process group (unlabelled helpers)."""

from __future__ import annotations

import dataclasses
from typing import Optional

from sglang.srt.distributed.parallel_state import GroupCoordinator, get_dcp_rank
from sglang.srt.runtime_context import get_parallel
from sglang.srt.server_args import ServerArgs


@dataclasses.dataclass(frozen=True)
class DcpView:
    size: int = 1
    rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.size > 1

    @classmethod
    def from_parallel(cls) -> "DcpView":
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return cls()
        return cls(parallel.dcp_size, parallel.dcp_rank)

    @classmethod
    def from_server_args(cls, server_args: ServerArgs) -> "DcpView":
        if server_args.dcp_size <= 1:
            return cls()
        return cls(server_args.dcp_size, get_dcp_rank())

    @classmethod
    def from_group(cls, group: Optional[GroupCoordinator]) -> "DcpView":
        if group is None or group.world_size <= 1:
            return cls()
        return cls(group.world_size, group.rank_in_group)
