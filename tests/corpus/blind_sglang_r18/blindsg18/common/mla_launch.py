"""Thin launch wrappers around FlashInfer's TRT-LLM / cute-dsl MLA decode.

Kept out of the backends so the fork's several MLA backends (decode,
multi-step draft, hybrid) issue the kernel with one argument convention.
The wrappers forward what they are given; callers own the length semantics.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.kernels.jit.utils import is_arch_support_pdl
from sglang.srt.environ import envs
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer

_ENABLE_PDL = is_arch_support_pdl()


def launch_mla_decode(
    *,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    qk_nope_head_dim: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    bmm1_scale: float,
    return_lse: bool = False,
    backend: str = "trtllm-gen",
    multi_ctas_kv_counter_buffer: Optional[torch.Tensor] = None,
):
    """Plain (non-DCP) TRT-LLM MLA decode / spec-verify launch."""
    extra = {}
    if backend != "trtllm-gen":
        extra["backend"] = backend
    elif multi_ctas_kv_counter_buffer is not None:
        extra["multi_ctas_kv_counter_buffer"] = multi_ctas_kv_counter_buffer
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=workspace_buffer,
        qk_nope_head_dim=qk_nope_head_dim,
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32),
        max_seq_len=max_seq_len,
        bmm1_scale=bmm1_scale,
        return_lse=return_lse,
        enable_pdl=_ENABLE_PDL,
        skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
        **extra,
    )


def launch_mla_decode_dcp(
    *,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    qk_nope_head_dim: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    bmm1_scale: float,
    cp_world: int,
    cp_rank: int,
    causal_seqs: torch.Tensor,
):
    """cute-dsl monolithic MLA decode with in-kernel DCP masking.

    ``seq_lens``: what this rank's page table covers per request.
    ``causal_seqs``: the global causal bound per request.
    Returns the rank-local ``(out, lse)``.
    """
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=workspace_buffer,
        qk_nope_head_dim=qk_nope_head_dim,
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32),
        max_seq_len=max_seq_len,
        bmm1_scale=bmm1_scale,
        backend="cute-dsl",
        enable_dcp=True,
        cp_world=cp_world,
        cp_rank=cp_rank,
        causal_seqlens_kv_global=(
            causal_seqs if causal_seqs.dtype == torch.int32 else causal_seqs.to(torch.int32)
        ),
        return_lse=True,
    )
