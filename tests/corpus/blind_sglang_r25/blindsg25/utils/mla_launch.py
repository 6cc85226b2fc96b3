"""Thin wrappers around FlashInfer's MLA decode entry points.

``launch_trtllm_mla_decode`` is the single place the fork calls
``flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla``; backends pass the
DCP arguments through (``cp_world > 1`` selects the cute-dsl DCP kernel).
``plan_mla_decode_wrapper`` is the legacy flat-metadata ``plan`` of
``BatchMLAPagedAttentionWrapper`` as SGLang's decode indices updater calls it.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.environ import envs
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer


def launch_trtllm_mla_decode(
    backend,
    *,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    bmm1_scale: float,
    causal_seqs: Optional[torch.Tensor] = None,
    cp_world: int = 1,
    cp_rank: int = 0,
    return_lse: bool = False,
):
    extra_kwargs = {}
    if cp_world > 1:
        extra_kwargs.update(
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=cp_world,
            cp_rank=cp_rank,
            causal_seqlens_kv_global=(
                causal_seqs
                if causal_seqs is None or causal_seqs.dtype == torch.int32
                else causal_seqs.to(torch.int32)
            ),
        )
        return_lse = True
    elif backend.backend != "trtllm-gen":
        extra_kwargs["backend"] = backend.backend
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=(
            seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32)
        ),
        max_seq_len=max_seq_len,
        bmm1_scale=bmm1_scale,
        return_lse=return_lse,
        skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
        **extra_kwargs,
    )


def plan_mla_decode_wrapper(
    wrapper,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_len_arr: torch.Tensor,
    *,
    num_heads: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    sm_scale: float,
    data_type: torch.dtype,
) -> None:
    wrapper.plan(
        qo_indptr,
        kv_indptr,
        kv_indices,
        kv_len_arr,
        num_heads,
        kv_lora_rank,
        qk_rope_head_dim,
        1,
        False,
        sm_scale,
        data_type,
        data_type,
    )
