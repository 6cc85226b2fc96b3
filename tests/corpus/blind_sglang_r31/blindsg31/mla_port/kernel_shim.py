"""Thin wrappers over the MLA decode kernels the port launches.

Each wrapper forwards its length arguments verbatim: whatever the caller
passes as ``seq_lens`` / ``kv_len_arr`` / ``kv_indptr`` is what the kernel
treats as this rank's KV extent.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.environ import envs
from sglang.srt.utils import is_flashinfer_available, is_hip

if is_flashinfer_available():
    import flashinfer

if is_hip():
    try:
        from aiter.mla import mla_decode_fwd
    except ImportError:  # pragma: no cover - older aiter wheels
        mla_decode_fwd = None
else:
    mla_decode_fwd = None


def trtllm_gen_mla_decode(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    *,
    qk_nope_head_dim: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    bmm1_scale: float,
    return_lse: bool = False,
):
    """trtllm-gen MLA decode (no in-kernel DCP support)."""
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=workspace_buffer,
        qk_nope_head_dim=qk_nope_head_dim,
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=seq_lens.to(torch.int32),
        max_seq_len=max_seq_len,
        bmm1_scale=bmm1_scale,
        return_lse=return_lse,
        skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
    )


def cute_dsl_mla_decode_dcp(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    *,
    causal_seqlens_kv_global: torch.Tensor,
    cp_world: int,
    cp_rank: int,
    qk_nope_head_dim: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    bmm1_scale: float,
):
    """cute-dsl MLA decode with cyclic DCP metadata; returns (out, lse)."""
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=workspace_buffer,
        qk_nope_head_dim=qk_nope_head_dim,
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=seq_lens.to(torch.int32),
        max_seq_len=max_seq_len,
        bmm1_scale=bmm1_scale,
        backend="cute-dsl",
        enable_dcp=True,
        cp_world=cp_world,
        cp_rank=cp_rank,
        causal_seqlens_kv_global=causal_seqlens_kv_global.to(torch.int32),
        return_lse=True,
    )


def aiter_mla_decode(
    q: torch.Tensor,
    kv_buffer: torch.Tensor,
    out: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_last_page_len: torch.Tensor,
    max_seqlen_q: int,
    *,
    sm_scale: float,
    logit_cap: float = 0.0,
    return_lse: bool = False,
    g_kv_indptr: Optional[torch.Tensor] = None,
    cp_world_size: int = 1,
    cp_rank: int = 0,
    causal: bool = False,
    **persistent_meta,
):
    """aiter asm MLA decode. ``kv_indptr`` is this rank's KV CSR; under DCP
    a multi-token query also needs ``g_kv_indptr`` (the global CSR)."""
    extra = dict(persistent_meta)
    if cp_world_size > 1:
        extra.update(
            g_kv_indptr=g_kv_indptr,
            cp_world_size=cp_world_size,
            cp_rank=cp_rank,
            causal=causal,
        )
    return mla_decode_fwd(
        q,
        kv_buffer,
        out,
        qo_indptr,
        kv_indptr,
        kv_indices,
        kv_last_page_len,
        max_seqlen_q,
        sm_scale=sm_scale,
        logit_cap=logit_cap,
        return_lse=return_lse,
        **extra,
    )


def fi_mla_plan(
    wrapper,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_len_arr: torch.Tensor,
    *,
    num_heads: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    causal: bool,
    sm_scale: float,
    q_data_type: torch.dtype,
    kv_data_type: torch.dtype,
    page_size: int = 1,
):
    """FlashInfer ``BatchMLAPagedAttentionWrapper.plan`` (legacy CSR form)."""
    wrapper.plan(
        qo_indptr,
        kv_indptr,
        kv_indices,
        kv_len_arr,
        num_heads,
        kv_lora_rank,
        qk_rope_head_dim,
        page_size,
        causal,
        sm_scale,
        q_data_type,
        kv_data_type,
    )


def csr_from_lens(lens: torch.Tensor) -> torch.Tensor:
    indptr = torch.zeros(lens.shape[0] + 1, dtype=torch.int32, device=lens.device)
    indptr[1:] = torch.cumsum(lens, dim=0)
    return indptr
