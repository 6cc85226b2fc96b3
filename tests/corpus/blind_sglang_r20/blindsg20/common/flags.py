"""Fork feature flags.

Most flags come from environment variables (so they can be flipped on a live
deployment without touching the launch command); a few are derived from the
resolved ``ServerArgs`` / runtime context.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang.srt.runtime_context import get_parallel
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.common import get_bool_env_var, get_int_env_var


@dataclass(frozen=True)
class ForkSpecFlags:
    # Pre-plan the eager (non-graph) draft decode outside ModelRunner.forward.
    preplan_eager_draft: bool = True
    # Let the forward path re-plan a pre-planned batch whose shape changed.
    allow_post_pad_replan: bool = False
    # trtllm_mla: skip the generic capture/replay body on plain decode replays.
    fast_decode_replay: bool = False
    # Split very wide DCP decode launches into row chunks.
    max_rows_per_dcp_launch: int = 0

    @classmethod
    def from_server_args(cls, server_args: ServerArgs) -> "ForkSpecFlags":
        return cls(
            preplan_eager_draft=get_bool_env_var(
                "SGLANG_FORK_PREPLAN_EAGER_DRAFT", "true"
            ),
            allow_post_pad_replan=get_bool_env_var(
                "SGLANG_FORK_ALLOW_POST_PAD_REPLAN", "false"
            ),
            fast_decode_replay=get_bool_env_var(
                "SGLANG_FORK_FAST_DECODE_REPLAY", "false"
            ),
            max_rows_per_dcp_launch=get_int_env_var(
                "SGLANG_FORK_MAX_ROWS_PER_DCP_LAUNCH", 0
            ),
        )


def dcp_world_from_server_args(server_args: ServerArgs) -> int:
    """``--dcp-size`` as configured (1 when DCP is off)."""
    return int(getattr(server_args, "dcp_size", 1) or 1)


def dcp_rank_now() -> int:
    parallel = get_parallel()
    return parallel.dcp_rank if parallel.dcp_enabled else 0
