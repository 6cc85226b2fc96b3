"""Thin launch wrappers around FlashInfer's MLA decode entry."""

from __future__ import annotations

import functools
from typing import Optional

import torch

from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer


# expect: clean
def launch_mla_decode(
    backend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    bmm1_scale: float,
    **extra,
):
    """Launch the trtllm-gen MLA decode kernel with the backend's dims."""
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
        **extra,
    )


def _dcp_decode_entry():
    return functools.partial(
        flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
        backend="cute-dsl",
        enable_dcp=True,
        return_lse=True,
    )


# expect: clean
def dcp_decode_kwargs(
    causal_global: Optional[torch.Tensor], cp_world: int, cp_rank: int
) -> dict:
    kwargs = {"cp_world": cp_world, "cp_rank": cp_rank}
    if causal_global is not None:
        kwargs["causal_seqlens_kv_global"] = causal_global.to(torch.int32)
    return kwargs
