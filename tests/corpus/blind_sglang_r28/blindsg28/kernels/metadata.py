"""Per-forward metadata filled in init_forward_metadata and read by the
decode / verify launches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass
class DcpDecodeMetadata:
    # Page table over this rank's cyclic KV slice.
    block_kv_indices: Optional[torch.Tensor] = None
    # Rank-local KV lengths (what this rank's cache holds per request).
    local_seq_lens: Optional[torch.Tensor] = None
    # Whole-sequence KV lengths (scheduler view), kept for causal bounds.
    global_seq_lens: Optional[torch.Tensor] = None
    # Rank-local scheduling bound.
    max_local_len: Optional[int] = None
    batch_size: int = 0
    q_len: int = 1


@dataclass
class DcpVerifyMetadata:
    block_kv_indices: torch.Tensor
    local_seq_lens: torch.Tensor
    # Exclusive global causal bound of the newest query token per request.
    causal_bound: torch.Tensor
    max_local_len: int
    draft_token_num: int
