"""KV-length helpers for decode context parallelism (DCP) in the fork's MLA
backends. Naming follows TRTLLMMLADecodeMetadata: ``seq_lens_k`` is this
rank's share, ``global_seq_lens_k`` the whole sequence."""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


def rank_local_kv_lens(global_lens: torch.Tensor) -> torch.Tensor:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return global_lens
    return get_dcp_lens(global_lens, parallel.dcp_size, parallel.dcp_rank).to(
        torch.int32
    )


def verify_total_kv_lens(seq_lens: torch.Tensor, num_draft_tokens: int) -> torch.Tensor:
    """Whole-sequence KV length seen by target verify (prefix + draft window)."""
    return (seq_lens + num_draft_tokens).to(torch.int32)


@dataclasses.dataclass(frozen=True)
class DcpLens:
    local: torch.Tensor
    global_: torch.Tensor
    max_local: int

    @classmethod
    def for_seq_lens(cls, seq_lens: torch.Tensor, max_seq_len: int) -> "DcpLens":
        parallel = get_parallel()
        local = rank_local_kv_lens(seq_lens)
        if parallel.dcp_enabled:
            max_local = max(
                max_seq_len // parallel.dcp_size
                + int(parallel.dcp_rank < max_seq_len % parallel.dcp_size),
                1,
            )
        else:
            max_local = max_seq_len
        return cls(local=local, global_=seq_lens.to(torch.int32), max_local=max_local)


def maybe_bound(lens: DcpLens) -> Optional[torch.Tensor]:
    return lens.global_ if get_parallel().dcp_enabled else None
