"""Server-arg probes shared by the MTP workers (no planning here)."""

from __future__ import annotations

from typing import Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.common import require_mlp_sync


def dp_attention_enabled(server_args: Optional[ServerArgs] = None) -> bool:
    """DP attention as the operator asked for it, or as the runtime resolved it."""
    if server_args is not None:
        return bool(server_args.enable_dp_attention)
    return get_parallel().attn_dp_enabled


def mlp_sync_required() -> bool:
    """True when ModelRunner will run prepare_mlp_sync_batch on eager batches."""
    return require_mlp_sync()


def batch_will_be_padded(forward_batch: ForwardBatch) -> bool:
    """ModelRunner._prepare_eager_forward_batch pads iff the batch carries the
    DP token counts (init_mlp_sync_metadata stamped them)."""
    return forward_batch.global_num_tokens_cpu is not None


def two_batch_overlap_enabled(server_args: ServerArgs) -> bool:
    return bool(getattr(server_args, "enable_two_batch_overlap", False))
