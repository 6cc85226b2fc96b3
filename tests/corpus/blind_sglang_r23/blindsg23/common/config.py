"""Fork-wide knobs for the speculative paths.

The fork keeps its own small config object instead of reading ``get_spec()``
all over the place; it is filled once from the published runtime context.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass

from sglang.srt.runtime_context import get_parallel, get_spec


class DraftPlanPolicy(enum.Enum):
    """When the draft / draft-extend attention metadata is planned."""

    # Plan on the side (plan stream) before the forward and mark the batch.
    PREPLAN = "preplan"
    # Plan on the side, but let the forward re-plan when DP padding reshapes it.
    PREPLAN_REPLANNABLE = "preplan_replannable"
    # Never pre-plan; the forward plans.
    LAZY = "lazy"


# The plan-stream overlap is the default for the EAGLE path in this fork.
DEFAULT_DRAFT_PLAN_POLICY = DraftPlanPolicy.PREPLAN
DEFAULT_DRAFT_EXTEND_POLICY = DraftPlanPolicy.LAZY


def env_flag(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in ("1", "true", "yes", "on")


@dataclass
class SpecForkConfig:
    num_steps: int
    topk: int
    num_draft_tokens: int
    plan_policy: DraftPlanPolicy = DEFAULT_DRAFT_PLAN_POLICY
    extend_policy: DraftPlanPolicy = DEFAULT_DRAFT_EXTEND_POLICY
    overlap_plan_stream: bool = False
    log_draft_shapes: bool = False

    @classmethod
    def from_runtime(cls) -> "SpecForkConfig":
        spec = get_spec()
        return cls(
            num_steps=int(spec.speculative_num_steps or 1),
            topk=int(spec.speculative_eagle_topk or 1),
            num_draft_tokens=int(spec.speculative_num_draft_tokens or 1),
            overlap_plan_stream=env_flag("BLINDSG23_OVERLAP_PLAN_STREAM"),
            log_draft_shapes=env_flag("BLINDSG23_LOG_DRAFT_SHAPES"),
        )


@dataclass(frozen=True)
class DcpTopology:
    enabled: bool
    size: int
    rank: int

    @classmethod
    def current(cls) -> "DcpTopology":
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return cls(False, 1, 0)
        return cls(True, parallel.dcp_size, parallel.dcp_rank)
