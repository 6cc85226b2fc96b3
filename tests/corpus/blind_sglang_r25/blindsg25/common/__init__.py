from blindsg25.common.dp import dp_attention_enabled, mlp_sync_required
from blindsg25.common.planning import (
    batch_will_be_padded,
    maybe_preplan_forward_metadata,
    plan_only,
    preplan_forward_metadata,
)

__all__ = [
    "batch_will_be_padded",
    "dp_attention_enabled",
    "maybe_preplan_forward_metadata",
    "mlp_sync_required",
    "plan_only",
    "preplan_forward_metadata",
]
