"""Thin wrappers around the flashinfer MLA decode entry points."""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.environ import envs
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer


def launch_mla_decode(
    backend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    bmm1_scale: float,
    *,
    return_lse: bool = False,
    kernel: str = "trtllm-gen",
):
    """Launch the trtllm-gen / cute-dsl MLA decode with the backend's buffers."""
    extra = {}
    if kernel == "trtllm-gen":
        extra["multi_ctas_kv_counter_buffer"] = backend._multi_ctas_kv_counter_buffer
    else:
        extra["backend"] = kernel
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=seq_lens.to(torch.int32),
        max_seq_len=max_seq_len,
        bmm1_scale=bmm1_scale,
        return_lse=return_lse,
        skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
        **extra,
    )


def rank_local_lens(seq_lens: torch.Tensor) -> torch.Tensor:
    """This DCP rank's share of each request's KV length (identity without DCP)."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return seq_lens
    return get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank).to(
        torch.int32
    )


def local_max_seq_len(max_seq_len: int, dcp_size: int, dcp_rank: int) -> int:
    if dcp_size <= 1:
        return max_seq_len
    return max(max_seq_len // dcp_size + int(dcp_rank < max_seq_len % dcp_size), 1)


def maybe_global_bound(metadata) -> Optional[torch.Tensor]:
    return getattr(metadata, "global_seq_lens_k", None)
