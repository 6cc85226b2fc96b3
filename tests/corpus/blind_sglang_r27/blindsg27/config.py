"""Small knobs shared by the lookahead draft workers and the DCP MLA backends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple


@dataclass(frozen=True)
class LookaheadConfig:
    """Per-worker settings for the lookahead speculative method."""

    num_steps: int = 3
    topk: int = 1
    num_draft_tokens: int = 4
    # Plan the draft-extend / draft-decode metadata outside ModelRunner.forward.
    preplan_draft_extend: bool = True
    preplan_draft_decode: bool = True
    # Never plan ahead (debug switch).
    always_defer_plan: bool = False
    use_plan_stream: bool = True

    @classmethod
    def from_spec(cls, spec) -> "LookaheadConfig":
        return cls(
            num_steps=spec.speculative_num_steps,
            topk=spec.speculative_eagle_topk or 1,
            num_draft_tokens=spec.speculative_num_draft_tokens,
        )


@dataclass(frozen=True)
class BlockDraftConfig:
    """Settings for the block (DFlash-like) drafter."""

    block_size: int = 8
    preplan: bool = True
    always_defer_plan: bool = False
    mask_token_id: int = 0


@dataclass
class DcpKernelConfig:
    """Settings of the kernel team's DCP MLA backends."""

    interleave_size: int = 1
    hoist_lens: bool = True
    allow_spec_verify: bool = True
    tree_verify: bool = False
    rows_per_call: Optional[int] = None
    supported_kv_dtypes: Tuple[str, ...] = field(default_factory=lambda: ("bfloat16",))
