"""Query / KV plumbing shared by the fork's MLA backends (no kernel launches)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Tuple

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention


def save_mla_kv(
    backend: TRTLLMMLABackend,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
    k: torch.Tensor,
    k_rope: Optional[torch.Tensor],
) -> None:
    """DCP-aware KV write (the pool resolves the owner rank)."""
    backend.token_to_kv_pool.set_mla_kv_buffer(
        layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
    )


def build_mla_query(
    q: torch.Tensor,
    q_rope: Optional[torch.Tensor],
    layer: RadixAttention,
    tokens_per_req: int,
) -> torch.Tensor:
    """[num_tokens, ...] -> [bs, tokens_per_req, heads, head_dim]."""
    if q_rope is not None:
        q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        q_pe = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
        query = torch.cat([q_nope, q_pe], dim=-1)
    else:
        query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
    return query.view(-1, tokens_per_req, layer.tp_q_head_num, layer.head_dim)


def mla_kv_cache(backend: TRTLLMMLABackend, layer: RadixAttention) -> torch.Tensor:
    k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    return paged_row_view(k_cache, backend.page_size).unsqueeze(1)


def finish_dcp_decode(
    raw_out: torch.Tensor,
    lse: torch.Tensor,
    local_seq_lens: torch.Tensor,
    q_indptr: torch.Tensor,
    layer: RadixAttention,
    tokens_per_req: int = 1,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Neutralize rows this rank owns no KV for, return (out, lse) for the merge."""
    output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(-1, layer.tp_q_head_num)
    fixup_zero_kv_rows(output, lse, local_seq_lens, q_indptr, tokens_per_req)
    return output.flatten(1), lse
