"""Query / KV-cache preparation shared by the fork's MLA decode backends.

Mirrors the bf16 / fp8 preamble of ``TRTLLMMLABackend.forward_decode`` so the
subclasses only differ in how they pick lengths and launch.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from sglang.kernels.ops.attention.utils import (
    concat_mla_absorb_q_general,
    mla_quantize_without_rope_for_fp8,
)
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc


def prepare_decode_query(
    backend,
    q: torch.Tensor,
    k: Optional[torch.Tensor],
    q_rope: Optional[torch.Tensor],
    k_rope: Optional[torch.Tensor],
    layer,
    forward_batch,
    save_kv_cache: bool,
) -> torch.Tensor:
    """Write this step's KV and return the [bs, q_len, heads, head_dim] query."""
    merge_query = q_rope is not None
    if backend.data_type == torch.float8_e4m3fn:
        q, k, k_rope = mla_quantize_without_rope_for_fp8(
            q, q_rope, k.squeeze(1), k_rope.squeeze(1)
        )
        merge_query = False
    if save_kv_cache:
        backend.token_to_kv_pool.set_mla_kv_buffer(
            layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
        )
    if merge_query:
        q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        q_rope_reshaped = q_rope.view(
            -1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim
        )
        query = concat_mla_absorb_q_general(q_nope, q_rope_reshaped)
    else:
        query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
    if query.dim() == 3:
        query = query.unsqueeze(1)
    return query


def paged_kv_cache(backend, layer) -> torch.Tensor:
    k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    return paged_row_view(k_cache, backend.page_size).unsqueeze(1)


def decode_metadata(backend, forward_batch):
    return (
        getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        or backend.forward_decode_metadata
    )


def split_out_lse(raw_out: torch.Tensor, lse: torch.Tensor, layer) -> Tuple[torch.Tensor, torch.Tensor]:
    output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    return output, lse.view(-1, layer.tp_q_head_num)
