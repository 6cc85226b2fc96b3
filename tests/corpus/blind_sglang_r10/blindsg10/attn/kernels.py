"""Thin launch helpers around FlashInfer's MLA decode entry.

Used by the fork's fused MLA layer, which launches the decode kernel itself
instead of going through ``RadixAttention`` -> backend ``forward_decode``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import torch

from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer


def decode_metadata(backend, forward_batch):
    return (
        getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        or backend.forward_decode_metadata
    )


def kv_cache_view(backend, layer) -> torch.Tensor:
    k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    return paged_row_view(k_cache, backend.page_size).unsqueeze(1)


def as_dense_query(query: torch.Tensor) -> torch.Tensor:
    return query.unsqueeze(1) if query.dim() == 3 else query


def mla_decode_common_kwargs(backend, layer) -> dict:
    return {
        "workspace_buffer": backend.workspace_buffer,
        "qk_nope_head_dim": backend.qk_nope_head_dim,
        "kv_lora_rank": backend.kv_lora_rank,
        "qk_rope_head_dim": backend.qk_rope_head_dim,
        "bmm1_scale": backend._compute_decode_bmm1_scale(layer),
    }


def make_cute_dcp_decode(backend, layer):
    """The cute-dsl DCP decode with everything but the per-step tensors bound."""
    parallel = get_parallel()
    return functools.partial(
        flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
        backend="cute-dsl",
        enable_dcp=True,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        return_lse=True,
        **mla_decode_common_kwargs(backend, layer),
    )


@dataclasses.dataclass
class MLADecodeArgs:
    query: torch.Tensor
    kv_cache: torch.Tensor
    block_tables: torch.Tensor
    seq_lens: Optional[torch.Tensor]
    max_seq_len: int
    causal_seqs: Optional[torch.Tensor] = None


def args_from_metadata(backend, query, layer, forward_batch) -> MLADecodeArgs:
    metadata = decode_metadata(backend, forward_batch)
    return MLADecodeArgs(
        query=as_dense_query(query),
        kv_cache=kv_cache_view(backend, layer),
        block_tables=metadata.block_kv_indices,
        seq_lens=metadata.seq_lens_k,
        max_seq_len=metadata.max_seq_len_k,
        causal_seqs=metadata.global_seq_lens_k,
    )


def _i32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.int32 else t.to(torch.int32)


def launch_mla_decode(args: MLADecodeArgs, backend, layer):
    """Launch one MLA decode; under DCP through cute-dsl with the global bound."""
    parallel = get_parallel()
    kwargs = mla_decode_common_kwargs(backend, layer)
    if parallel.dcp_enabled:
        kwargs.update(
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=_i32(args.causal_seqs),
            return_lse=True,
        )
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=args.query,
        kv_cache=args.kv_cache,
        block_tables=args.block_tables,
        seq_lens=_i32(args.seq_lens),
        max_seq_len=args.max_seq_len,
        **kwargs,
    )
