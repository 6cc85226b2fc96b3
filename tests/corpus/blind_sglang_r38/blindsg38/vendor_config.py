"""Parallel settings as the Kestrel integration layer sees them.

SGLang publishes DP-attention and DCP widths through ``get_parallel()``; a
few vendor deployments still drive them through server args or the
``KESTREL_*`` environment variables, so this module reads all three.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Optional

from sglang.srt.environ import envs
from sglang.srt.layers.dp_attention import is_dp_attention_enabled
from sglang.srt.runtime_context import get_parallel, get_spec
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.common import require_mlp_sync

logger = logging.getLogger(__name__)

_ENV_DCP_SIZE = "KESTREL_DCP_SIZE"
_ENV_DCP_RANK = "KESTREL_DCP_RANK"
_ENV_DRAFT_REPLAN = "KESTREL_DRAFT_REPLAN"
_ENV_MARK_POLICY = "KESTREL_DRAFT_MARK_POLICY"


def _env_flag(name: str, default: str = "0") -> bool:
    return os.environ.get(name, default).lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class KestrelParallelConfig:
    dp_attention: bool
    attn_dp_size: int
    dcp_size: int
    dcp_rank: int
    interleave_size: int = 1
    num_draft_tokens: int = 0

    @property
    def dcp_enabled(self) -> bool:
        return self.dcp_size > 1

    @property
    def needs_mlp_sync(self) -> bool:
        return self.dp_attention or require_mlp_sync()

    @classmethod
    def from_server_args(cls, server_args: ServerArgs) -> "KestrelParallelConfig":
        attn_dp_size = int(getattr(server_args, "attn_dp_size", 1) or 1)
        dp_attention = bool(getattr(server_args, "enable_dp_attention", False)) or (
            attn_dp_size > 1
        )
        dcp_size = int(getattr(server_args, "dcp_size", 1) or 1)
        parallel = get_parallel()
        dcp_rank = parallel.attn_dcp_rank if dcp_size > 1 else 0
        return cls(
            dp_attention=dp_attention,
            attn_dp_size=attn_dp_size,
            dcp_size=dcp_size,
            dcp_rank=dcp_rank,
            num_draft_tokens=get_spec().speculative_num_draft_tokens or 0,
        )

    @classmethod
    def from_runtime(cls) -> "KestrelParallelConfig":
        parallel = get_parallel()
        return cls(
            dp_attention=bool(parallel.attn_dp_enabled) or is_dp_attention_enabled(),
            attn_dp_size=parallel.attn_dp_size,
            dcp_size=parallel.attn_dcp_size,
            dcp_rank=parallel.attn_dcp_rank,
            num_draft_tokens=get_spec().speculative_num_draft_tokens or 0,
        )

    @classmethod
    def from_env(cls) -> "KestrelParallelConfig":
        return cls(
            dp_attention=_env_flag("KESTREL_DP_ATTENTION"),
            attn_dp_size=int(os.environ.get("KESTREL_ATTN_DP_SIZE", "1")),
            dcp_size=int(os.environ.get(_ENV_DCP_SIZE, "1")),
            dcp_rank=int(os.environ.get(_ENV_DCP_RANK, "0")),
        )


def dp_attention_active(server_args: Optional[ServerArgs] = None) -> bool:
    if server_args is not None and getattr(server_args, "enable_dp_attention", False):
        return True
    return bool(get_parallel().attn_dp_enabled) or require_mlp_sync()


def refuse_dp_attention(server_args: ServerArgs, component: str) -> None:
    if dp_attention_active(server_args):
        raise ValueError(
            f"{component} does not support --enable-dp-attention on Kestrel "
            "devices; disable DP attention or pick the default EAGLE worker."
        )


def warn_dp_attention(server_args: ServerArgs, component: str) -> None:
    if dp_attention_active(server_args):
        logger.warning(
            "%s with DP attention is experimental on Kestrel devices.", component
        )


def draft_replan_from_env() -> bool:
    return _env_flag(_ENV_DRAFT_REPLAN, "0")


def draft_mark_policy_from_env() -> str:
    return os.environ.get(_ENV_MARK_POLICY, "strict")


def dcp_world() -> tuple[int, int]:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return 1, 0
    return parallel.dcp_size, parallel.dcp_rank


def dcp_world_from_env() -> tuple[int, int]:
    return int(os.environ.get(_ENV_DCP_SIZE, "1")), int(
        os.environ.get(_ENV_DCP_RANK, "0")
    )


def refuse_dcp(component: str) -> None:
    if get_parallel().dcp_enabled:
        raise NotImplementedError(
            f"{component} has no decode-context-parallel support on Kestrel "
            "devices; run with --dcp-size 1."
        )


def kestrel_async_plan_enabled() -> bool:
    return envs.SGLANG_ENABLE_SPEC_V2.get() if hasattr(envs, "SGLANG_ENABLE_SPEC_V2") else True
