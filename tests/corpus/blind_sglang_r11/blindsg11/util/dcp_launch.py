"""Launch helpers around the flashinfer MLA decode entry.

These exist so the forked backends and the offline microbenchmarks share one
call site for ``trtllm_batch_decode_with_kv_cache_mla``.
"""

from __future__ import annotations

import functools
from typing import Callable, Optional

import torch
from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

from sglang.srt.environ import envs


def launch_mla_decode(
    backend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    lens: torch.Tensor,
    max_seq_len: int,
    layer,
    *,
    return_lse: bool = True,
):
    """Single-token MLA decode through the backend's kernel hook."""
    return backend._run_decode_kernel(
        query=query,
        kv_cache=kv_cache,
        block_tables=block_tables,
        seq_lens=lens,
        max_seq_len=max_seq_len,
        layer=layer,
        return_lse=return_lse,
    )


def make_decode_fn(
    backend,
    layer,
    block_tables: torch.Tensor,
    lens: torch.Tensor,
    max_seq_len: int,
) -> Callable[[torch.Tensor, torch.Tensor], tuple]:
    """Bind everything but the query/cache so per-layer code stays short."""

    def _decode(query: torch.Tensor, kv_cache: torch.Tensor):
        return backend._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=lens,
            max_seq_len=max_seq_len,
            layer=layer,
            return_lse=True,
        )

    return _decode


def mla_decode_launcher(backend, layer) -> functools.partial:
    """flashinfer MLA decode with the backend's static arguments bound."""
    return functools.partial(
        trtllm_batch_decode_with_kv_cache_mla,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
    )


def int32(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    if t is None or t.dtype == torch.int32:
        return t
    return t.to(torch.int32)
