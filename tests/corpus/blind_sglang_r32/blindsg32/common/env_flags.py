"""Environment switches for the MTP fork.

Kept separate from ``sglang.srt.environ.envs`` so the fork can be dropped
into a stock SGLang install without touching its flag registry.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


def _parse_bool(raw: str) -> bool:
    return raw.strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class EnvFlag(Generic[T]):
    name: str
    default: T
    parse: Callable[[str], T]

    def get(self) -> T:
        raw = os.environ.get(self.name)
        if raw is None or raw == "":
            return self.default
        return self.parse(raw)

    def is_set(self) -> bool:
        return self.name in os.environ


class MTPEnv:
    """All MTP fork flags in one namespace (``MTPEnv.REPLAN_AFTER_PAD.get()``)."""

    # Let the forward re-plan a pre-planned draft batch once DP padding has
    # grown it. Off by default: the DSA indexer cannot rebuild its schedule
    # on a padded batch.
    REPLAN_AFTER_PAD = EnvFlag("SGLANG_MTP_REPLAN_AFTER_PAD", False, _parse_bool)
    # Pre-plan draft batches on the plan stream even when DP attention is on.
    ALLOW_DP_PREPLAN = EnvFlag("SGLANG_MTP_ALLOW_DP_PREPLAN", True, _parse_bool)
    # Overlap draft planning with the target's sampling.
    USE_PLAN_STREAM = EnvFlag("SGLANG_MTP_USE_PLAN_STREAM", True, _parse_bool)
    # N-gram fallback window (0 disables the fallback).
    NGRAM_WINDOW = EnvFlag("SGLANG_MTP_NGRAM_WINDOW", 4, int)
    # Default per-request draft budget (tokens).
    DEFAULT_DRAFT_BUDGET = EnvFlag("SGLANG_MTP_DEFAULT_DRAFT_BUDGET", 3, int)
    # Force the trtllm-gen kernel even when cute-dsl is available.
    FORCE_TRTLLM_GEN = EnvFlag("SGLANG_MLA_FORK_FORCE_TRTLLM_GEN", False, _parse_bool)
