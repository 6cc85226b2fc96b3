"""Fork-only switches, read once from the environment.

These are deliberately kept outside SGLang's ServerArgs so that rebasing the
fork onto a new SGLang release does not touch the argument parser.
"""

import os
from dataclasses import dataclass


def _env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class ForkFlags:
    # Plan the eager draft-extend batch on the plan stream, ahead of the forward.
    preplan_draft_extend: bool = False
    # Plan the multi-step draft decode batch once, outside the step loop.
    preplan_draft_decode: bool = True
    # Keep the cute-dsl DCP decode on the hoisted (metadata) lengths.
    dcp_hoisted_lens: bool = True

    @classmethod
    def from_env(cls) -> "ForkFlags":
        return cls(
            preplan_draft_extend=_env_bool("BLINDSG_PREPLAN_DRAFT_EXTEND"),
            preplan_draft_decode=_env_bool("BLINDSG_PREPLAN_DRAFT_DECODE", True),
            dcp_hoisted_lens=_env_bool("BLINDSG_DCP_HOISTED_LENS", True),
        )


FORK_FLAGS = ForkFlags.from_env()
