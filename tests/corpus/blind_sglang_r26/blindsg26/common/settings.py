"""Per-step settings read once from server_args / the runtime context."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from sglang.srt.runtime_context import get_parallel, get_spec
from sglang.srt.utils.common import require_mlp_sync


def env_flag(name: str, default: str = "0") -> bool:
    return os.environ.get(name, default).strip().lower() in ("1", "true", "yes", "on")


@dataclass
class DraftStepSettings:
    """Speculative knobs the fork reads once per worker."""

    num_steps: int
    topk: int
    num_draft_tokens: int
    dp_attention: bool
    mlp_sync: bool
    # Fork-only switches (env driven, default off).
    preplan_draft_extend: bool = False
    preplan_verify: bool = False
    hoist_step_lens: bool = True

    @classmethod
    def from_server_args(cls, server_args) -> "DraftStepSettings":
        spec = get_spec()
        num_draft_tokens = getattr(server_args, "speculative_num_draft_tokens", None)
        return cls(
            num_steps=spec.speculative_num_steps,
            topk=spec.speculative_eagle_topk,
            num_draft_tokens=(
                num_draft_tokens
                if num_draft_tokens is not None
                else spec.speculative_num_draft_tokens
            ),
            dp_attention=get_parallel().attn_dp_enabled,
            mlp_sync=require_mlp_sync(),
            preplan_draft_extend=env_flag("SGLANG_FORK_PREPLAN_DRAFT_EXTEND"),
            preplan_verify=env_flag("SGLANG_FORK_PREPLAN_VERIFY"),
            hoist_step_lens=env_flag("SGLANG_FORK_HOIST_STEP_LENS", "1"),
        )

    @property
    def multi_step(self) -> bool:
        return self.num_steps > 1

    @property
    def pads_for_dp(self) -> bool:
        return self.dp_attention or self.mlp_sync


@dataclass(frozen=True)
class DcpLayout:
    """This rank's place in the decode-context-parallel group."""

    size: int
    rank: int

    @classmethod
    def current(cls) -> "DcpLayout":
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return cls(size=1, rank=0)
        return cls(size=parallel.dcp_size, rank=parallel.dcp_rank)

    @property
    def enabled(self) -> bool:
        return self.size > 1


@dataclass
class MlaLaunchSettings:
    """Per-backend MLA launch knobs (read once in the backend's __init__)."""

    use_hoisted_lens: bool
    fused_replay: bool
    max_context_len: int
    page_size: int
    warn_only_multi_token_dcp: bool = False
    num_draft_tokens: Optional[int] = None

    @classmethod
    def from_model_runner(cls, model_runner) -> "MlaLaunchSettings":
        spec = get_spec()
        return cls(
            use_hoisted_lens=env_flag("SGLANG_FORK_MLA_HOISTED_LENS", "1"),
            fused_replay=env_flag("SGLANG_FORK_MLA_FUSED_REPLAY"),
            max_context_len=model_runner.model_config.context_len,
            page_size=model_runner.page_size,
            warn_only_multi_token_dcp=env_flag("SGLANG_FORK_DCP_WARN_ONLY"),
            num_draft_tokens=spec.speculative_num_draft_tokens,
        )
