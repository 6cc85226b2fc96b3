"""Feature flags shared by both teams.

Flags are resolved once per process from ``ServerArgs`` (with environment
overrides) into a frozen dataclass so hot paths only do attribute reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs


def env_flag(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in ("1", "true", "yes", "on")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return int(raw)
    except ValueError:
        return default


@dataclass(frozen=True)
class VendorServingFlags:
    # Parallel topology, mirrored from ServerArgs.
    dp_size: int = 1
    enable_dp_attention: bool = False
    dcp_size: int = 1

    # Reliability team.
    lookahead_enabled: bool = True
    lookahead_window: int = 4
    lookahead_preplan_decode: bool = True
    standalone_preplan_extend: bool = True
    block_drafter_size: int = 16
    block_drafter_fast_path: bool = True
    eagle_preplan_draft_extend: bool = True

    # Accelerator team.
    mla_fast_decode_lens: bool = True
    mla_hoist_lens: bool = True
    mla_decode_chunk_bs: int = 256
    cute_dsl_strict: bool = True

    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def dp_attention_on(self) -> bool:
        # ServerArgs.enable_dp_attention is deprecated and resolves to False;
        # ask the runtime which attention-DP layout was actually published.
        from sglang.srt.layers.dp_attention import is_dp_attention_enabled

        return is_dp_attention_enabled()

    @property
    def dcp_on(self) -> bool:
        from sglang.srt.runtime_context import get_parallel

        return bool(get_parallel().dcp_enabled)

    @classmethod
    def from_server_args(cls, server_args: Optional["ServerArgs"]) -> "VendorServingFlags":
        sa: Any = server_args
        dp_size = int(getattr(sa, "dp_size", 1) or 1)
        return cls(
            dp_size=dp_size,
            enable_dp_attention=bool(getattr(sa, "enable_dp_attention", dp_size > 1)),
            dcp_size=int(getattr(sa, "dcp_size", 1) or 1),
            lookahead_enabled=env_flag("VENDOR_LOOKAHEAD", True),
            lookahead_window=env_int("VENDOR_LOOKAHEAD_WINDOW", 4),
            lookahead_preplan_decode=env_flag("VENDOR_LOOKAHEAD_PREPLAN", True),
            standalone_preplan_extend=env_flag("VENDOR_STANDALONE_PREPLAN", True),
            block_drafter_size=env_int("VENDOR_BLOCK_SIZE", 16),
            block_drafter_fast_path=env_flag("VENDOR_BLOCK_FAST_PATH", True),
            eagle_preplan_draft_extend=env_flag("VENDOR_EAGLE_PREPLAN", True),
            mla_fast_decode_lens=env_flag("VENDOR_MLA_FAST_LENS", True),
            mla_hoist_lens=env_flag("VENDOR_MLA_HOIST_LENS", True),
            mla_decode_chunk_bs=env_int("VENDOR_MLA_CHUNK_BS", 256),
            cute_dsl_strict=env_flag("VENDOR_CUTE_DSL_STRICT", True),
        )


_FLAGS: Optional[VendorServingFlags] = None


def get_vendor_flags(server_args: Optional["ServerArgs"] = None) -> VendorServingFlags:
    global _FLAGS
    if _FLAGS is None:
        _FLAGS = VendorServingFlags.from_server_args(server_args)
    return _FLAGS
