"""Fork-local switches, read once at import time.

The fork keeps its knobs as environment variables (``SGLANG_FORK_*``) rather
than server args so they can be flipped per deployment without touching the
launch scripts.
"""

from __future__ import annotations

import os

from sglang.srt.utils.common import require_mlp_sync


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in ("1", "true", "yes", "on")


# Plan the eager draft-extend batch ahead of the forward (on the plan stream
# when one exists) so the metadata build overlaps the target sampling kernels.
PREPLAN_DRAFT_EXTEND = _env_bool("SGLANG_FORK_PREPLAN_DRAFT_EXTEND", True)

# When a pre-planned draft-extend batch may be re-planned by the runner after
# DP padding. Either setting is safe: off leaves the batch unmarked.
DRAFT_EXTEND_REPLAN_ON_PAD = _env_bool("SGLANG_FORK_DRAFT_EXTEND_REPLAN_ON_PAD", True)

# Micro-batch width for the DCP decode launch (bounds the cute-dsl workspace).
DCP_DECODE_MICRO_BS = int(os.environ.get("SGLANG_FORK_DCP_DECODE_MICRO_BS", "64"))


def dp_padding_expected(forward_batch) -> bool:
    """True when the model runner will MLP-sync pad ``forward_batch``."""
    return forward_batch.global_num_tokens_cpu is not None


def mlp_sync_required() -> bool:
    return require_mlp_sync()
