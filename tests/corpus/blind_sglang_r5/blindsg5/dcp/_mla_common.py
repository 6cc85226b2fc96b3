"""Query / KV-cache preparation shared by the fork's MLA decode overrides.

Nothing here touches KV lengths; the callers choose them.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc


def build_decode_query(
    backend,
    q: torch.Tensor,
    q_rope: Optional[torch.Tensor],
    k: Optional[torch.Tensor],
    k_rope: Optional[torch.Tensor],
    layer,
    forward_batch,
    save_kv_cache: bool = True,
) -> torch.Tensor:
    """Write this step's KV and return the absorbed query [tokens, heads, dim]."""
    if save_kv_cache and k is not None and k_rope is not None:
        backend.token_to_kv_pool.set_mla_kv_buffer(
            layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
        )
    if q_rope is not None:
        q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        q_pe = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
        query = concat_mla_absorb_q_general(q_nope, q_pe)
    else:
        query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
    return query.to(backend.data_type)


def paged_kv_cache(backend, layer) -> torch.Tensor:
    k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    return paged_row_view(k_cache, backend.page_size).unsqueeze(1)


def finish_rank_local(raw_out, lse, local_lens, q_indptr, tokens_per_req, layer):
    """Neutralise rows this rank owns no KV for; return (out, lse) for the merge."""
    output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(-1, layer.tp_q_head_num)
    fixup_zero_kv_rows(output, lse, local_lens, q_indptr, tokens_per_req)
    return output.flatten(1), lse
