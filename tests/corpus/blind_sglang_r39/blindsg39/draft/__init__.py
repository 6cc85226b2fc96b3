"""Speculative draft / verify workers of the fork (EAGLE v2, Frozen-KV MTP,
multi-layer EAGLE) built from the planning mixins in :mod:`.mixins`."""

from blindsg39.draft.utils import (
    DraftPlanRecord,
    PlannedDraftBatch,
    dp_attention_enabled,
)

__all__ = ["DraftPlanRecord", "PlannedDraftBatch", "dp_attention_enabled"]
