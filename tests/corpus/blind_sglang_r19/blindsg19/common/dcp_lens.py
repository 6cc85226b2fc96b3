"""Length helpers for decode context parallel (DCP) MLA decode."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Iterator, Optional

import torch

from sglang.srt.distributed.parallel_state import get_dcp_rank, get_dcp_world_size
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel


def rank_local_lens(seq_lens: torch.Tensor) -> torch.Tensor:
    """This DCP rank's share of each request's KV length (int32)."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return seq_lens.to(torch.int32)
    return get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank).to(
        torch.int32
    )


def rank_local_lens_from_group(seq_lens: torch.Tensor) -> torch.Tensor:
    """Same as :func:`rank_local_lens`, reading the DCP group directly."""
    world = get_dcp_world_size()
    if world == 1:
        return seq_lens.to(torch.int32)
    return get_dcp_lens(seq_lens, world, get_dcp_rank()).to(torch.int32)


def rank_local_max(max_seq_len: int) -> int:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return max_seq_len
    share = max_seq_len // parallel.dcp_size + int(
        parallel.dcp_rank < max_seq_len % parallel.dcp_size
    )
    return max(share, 1)


class KVLensProvider:
    """Hands attention backends the KV lengths they launch with."""

    def __init__(self, num_draft_tokens: int = 0):
        self.num_draft_tokens = num_draft_tokens

    def for_kernel(self, forward_batch: ForwardBatch) -> torch.Tensor:
        seq_lens = forward_batch.seq_lens[: forward_batch.batch_size]
        if forward_batch.forward_mode.is_target_verify():
            seq_lens = seq_lens + self.num_draft_tokens
        return seq_lens.to(torch.int32)

    def local_for_kernel(self, forward_batch: ForwardBatch) -> torch.Tensor:
        return rank_local_lens(self.for_kernel(forward_batch))

    def causal_bound(self, forward_batch: ForwardBatch) -> torch.Tensor:
        return self.for_kernel(forward_batch)


@contextlib.contextmanager
def dcp_local_view(forward_batch: ForwardBatch) -> Iterator[SimpleNamespace]:
    """A read-only view of the batch's lengths as this DCP rank holds them."""
    bs = forward_batch.batch_size
    global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    yield SimpleNamespace(
        batch_size=bs,
        seq_lens=rank_local_lens(global_lens),
        global_seq_lens=global_lens,
        max_seq_len=rank_local_max(
            int(forward_batch.seq_lens_cpu[:bs].max())
            if forward_batch.seq_lens_cpu is not None
            else int(global_lens.max().item()) if bs > 0 else 1
        ),
    )


@dataclass
class MLADecodeLaunch:
    """Arguments of one trtllm-gen / cute-dsl MLA decode launch."""

    query: torch.Tensor
    kv_cache: torch.Tensor
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    max_seq_len: int
    causal_seqs: Optional[torch.Tensor] = None

    @classmethod
    def from_batch(cls, query, kv_cache, metadata, forward_batch) -> "MLADecodeLaunch":
        bs = forward_batch.batch_size
        seq_lens = (
            metadata.global_seq_lens_k
            if metadata.global_seq_lens_k is not None
            else metadata.seq_lens_k
        )
        return cls(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            causal_seqs=metadata.global_seq_lens_k,
        )

    @classmethod
    def from_batch_local(
        cls, query, kv_cache, metadata, forward_batch
    ) -> "MLADecodeLaunch":
        bs = forward_batch.batch_size
        global_lens = (
            metadata.global_seq_lens_k
            if metadata.global_seq_lens_k is not None
            else forward_batch.seq_lens.to(torch.int32)
        )
        return cls(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=rank_local_lens(global_lens[:bs]),
            max_seq_len=metadata.max_seq_len_k,
            causal_seqs=global_lens[:bs],
        )
