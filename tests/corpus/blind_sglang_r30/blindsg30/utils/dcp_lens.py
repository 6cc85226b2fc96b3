"""Length bookkeeping for decode context parallelism (DCP).

Imported as ``from blindsg30.utils import dcp_lens as dl``.
"""

from __future__ import annotations

from typing import Tuple

import torch

from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


def local_lens(seq_lens: torch.Tensor) -> torch.Tensor:
    """This rank's share of each request's KV length (int32)."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return seq_lens.to(torch.int32)
    return get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank).to(
        torch.int32
    )


def local_max(max_seq_len: int) -> int:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return max_seq_len
    local = max_seq_len // parallel.dcp_size + int(
        parallel.dcp_rank < max_seq_len % parallel.dcp_size
    )
    return max(local, 1)


def verify_global_lens(seq_lens: torch.Tensor, draft_token_num: int) -> torch.Tensor:
    return (seq_lens + draft_token_num).to(torch.int32)


def split_lens(seq_lens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(global, rank-local) int32 lengths."""
    glob = seq_lens.to(torch.int32)
    return glob, local_lens(glob)
