"""Shared MLA query / KV-cache preparation for our decode backends."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Tuple

import torch

from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc

if TYPE_CHECKING:
    from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def prepare_mla_query_and_cache(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    k: Optional[torch.Tensor],
    layer: RadixAttention,
    forward_batch: ForwardBatch,
    save_kv_cache: bool,
    q_rope: Optional[torch.Tensor],
    k_rope: Optional[torch.Tensor],
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Write this step's KV, merge [q_nope | q_rope], and view the paged cache.

    Returns the query as [bs, q_len, heads, head_dim] for decode (q_len == 1)
    and the flat [tokens, heads, head_dim] for extend-shaped batches.
    """
    if save_kv_cache:
        assert k is not None and k_rope is not None
        backend.token_to_kv_pool.set_mla_kv_buffer(
            layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
        )
    if q_rope is not None:
        q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        q_pe = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
        query = concat_mla_absorb_q_general(q_nope, q_pe)
    else:
        query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
    if forward_batch.forward_mode.is_decode_or_idle() and query.dim() == 3:
        query = query.unsqueeze(1)
    k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    kv_cache = paged_row_view(k_cache, backend.page_size).unsqueeze(1)
    return query.to(backend.data_type), kv_cache
