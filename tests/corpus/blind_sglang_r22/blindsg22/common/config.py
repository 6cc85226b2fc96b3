"""Fork-level knobs for the speculative paths.

Kept out of ServerArgs on purpose: these are per-deployment experiments that
the fork toggles from the launcher config or from the environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

_PREPLAN_ENV = "BLINDSG22_PREPLAN_DRAFT_EXTEND"
_LOCAL_LENS_ENV = "BLINDSG22_DCP_LOCAL_LENS"
_LOCAL_LENS_HELPER_ENV = "BLINDSG22_DCP_LENS_HELPER"


@dataclass(frozen=True)
class ForkSpecConfig:
    """Planning policy for the fork's draft / verify forwards."""

    # Plan the draft-extend batch on the plan stream, ahead of the forward.
    preplan_draft_extend: bool = True
    # Whether a forward-path re-plan is equivalent to the pre-plan.
    replan_equivalent: bool = False
    # Pad the batch for DP attention before planning (mirror of
    # ModelRunner._prepare_eager_forward_batch).
    pad_before_plan: bool = False


@dataclass(frozen=True)
class ForkMLAConfig:
    """MLA decode policy under decode context parallelism."""

    # Derive rank-local KV lengths before the launch.
    localize_lens: bool = False
    # Refuse DCP outright (the fork's kernel has no DCP support).
    refuse_dcp: bool = False


DEFAULT_SPEC_CONFIG = ForkSpecConfig()
REPLAN_SPEC_CONFIG = ForkSpecConfig(replan_equivalent=True)
DEFAULT_MLA_CONFIG = ForkMLAConfig()
REFUSING_MLA_CONFIG = ForkMLAConfig(refuse_dcp=True)


def preplan_enabled_from_env() -> bool:
    return os.environ.get(_PREPLAN_ENV, "1") == "1"


def dcp_local_lens_from_env() -> bool:
    return os.environ.get(_LOCAL_LENS_ENV, "1") == "1"


def dcp_lens_helper_from_env() -> str:
    """Which SGLang helper derives the rank-local lengths: "layout" or "backend"."""
    return os.environ.get(_LOCAL_LENS_HELPER_ENV, "backend")
