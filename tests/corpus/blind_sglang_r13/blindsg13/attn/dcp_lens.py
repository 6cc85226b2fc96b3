"""Length helpers for decode context parallel (DCP) MLA decode.

Under DCP each rank holds an interleaved slice of every request's KV. The
"global" lengths are the whole-sequence lengths the scheduler knows about;
the "local" lengths are how many of those tokens this rank holds.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Dict, Iterator, Optional

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer


def whole_kv_lens(forward_batch, num_draft_tokens: int = 0) -> torch.Tensor:
    """Whole-sequence KV length per request (what the scheduler tracks)."""
    lens = forward_batch.seq_lens[: forward_batch.batch_size]
    if num_draft_tokens:
        lens = lens + num_draft_tokens
    return lens.to(torch.int32)


def rank_local_kv_lens(global_lens: torch.Tensor) -> torch.Tensor:
    """This rank's share of ``global_lens`` (identity with DCP off)."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return global_lens
    return get_dcp_lens(global_lens, parallel.dcp_size, parallel.dcp_rank).to(
        torch.int32
    )


def clamp_kv_lens(lens: torch.Tensor) -> torch.Tensor:
    """Kernels want every row to have at least one key (padded rows)."""
    return lens.clamp(min=1).to(torch.int32)


@dataclass
class DcpLens:
    local: torch.Tensor
    global_: torch.Tensor

    @classmethod
    def from_global(cls, global_lens: torch.Tensor) -> "DcpLens":
        return cls(local=rank_local_kv_lens(global_lens), global_=global_lens)


def make_mla_decode_launcher(backend: Any) -> functools.partial:
    """Bind the per-backend constants of the trtllm MLA decode entry."""
    return functools.partial(
        flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
    )


def build_mla_launch_kwargs(
    backend: Any,
    *,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    bmm1_scale: float,
    return_lse: bool = False,
) -> Dict[str, Any]:
    return {
        "query": query,
        "kv_cache": kv_cache,
        "workspace_buffer": backend.workspace_buffer,
        "qk_nope_head_dim": backend.qk_nope_head_dim,
        "kv_lora_rank": backend.kv_lora_rank,
        "qk_rope_head_dim": backend.qk_rope_head_dim,
        "block_tables": block_tables,
        "seq_lens": seq_lens,
        "max_seq_len": max_seq_len,
        "bmm1_scale": bmm1_scale,
        "return_lse": return_lse,
    }


def iter_decode_lens(
    forward_batch, chunk: int
) -> Iterator[tuple[slice, torch.Tensor]]:
    """Split the batch into row chunks (for very large decode batches)."""
    bs = forward_batch.batch_size
    for start in range(0, bs, chunk):
        rows = slice(start, min(start + chunk, bs))
        yield rows, forward_batch.seq_lens[rows].to(torch.int32)


def iter_local_decode_lens(
    forward_batch, chunk: int
) -> Iterator[tuple[slice, torch.Tensor]]:
    for rows, lens in iter_decode_lens(forward_batch, chunk):
        yield rows, rank_local_kv_lens(lens)
