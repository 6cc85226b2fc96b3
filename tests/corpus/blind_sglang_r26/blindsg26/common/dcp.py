"""Decode-context-parallel helpers on top of ``sglang.srt.layers.dcp``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


def dcp_on() -> bool:
    return get_parallel().dcp_enabled


def localize_lens(seq_lens: torch.Tensor) -> torch.Tensor:
    """Rank-local int32 KV lengths (identity without DCP)."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return seq_lens.to(torch.int32)
    return get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank).to(
        torch.int32
    )


def local_max_len(max_seq_len: int) -> int:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return max_seq_len
    local = max_seq_len // parallel.dcp_size + int(
        parallel.dcp_rank < max_seq_len % parallel.dcp_size
    )
    return max(local, 1)


def query_len_per_request(query: torch.Tensor) -> int:
    return query.shape[1] if query.dim() == 4 else 1


def refuse_multi_token_dcp(query: torch.Tensor, what: str) -> None:
    """The trtllm-gen MLA kernel cannot take a global causal bound."""
    if get_parallel().dcp_enabled and query_len_per_request(query) > 1:
        raise NotImplementedError(
            f"{what}: DCP with more than one query token per request needs the "
            "global causal bound (cute-dsl MLA); trtllm-gen cannot take it"
        )


@dataclass
class DecodeLaunchArgs:
    """Arguments of one MLA decode launch, assembled once per step."""

    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    max_seq_len: int
    causal_seqs: Optional[torch.Tensor] = None

    @classmethod
    def from_batch(cls, forward_batch, metadata) -> "DecodeLaunchArgs":
        bs = forward_batch.batch_size
        return cls(
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens[:bs].to(torch.int32),
            max_seq_len=metadata.max_seq_len_k,
        )

    @classmethod
    def from_batch_local(cls, forward_batch, metadata) -> "DecodeLaunchArgs":
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        return cls(
            block_tables=metadata.block_kv_indices,
            seq_lens=localize_lens(global_lens),
            max_seq_len=metadata.max_seq_len_k,
            causal_seqs=global_lens,
        )
