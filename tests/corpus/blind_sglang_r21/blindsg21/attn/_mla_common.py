"""Query / KV preparation shared by the fork's trtllm_mla-family backends.

Mirrors the bf16 and fp8 (no fused RoPE) query paths of
``TRTLLMMLABackend.forward_decode`` so the fork overrides below can focus on
the kernel launch.  Mixed in front of ``TRTLLMMLABackend`` subclasses.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import (
    concat_mla_absorb_q_general,
    mla_quantize_without_rope_for_fp8,
)
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc


class MLAQueryPrepMixin:
    def _prep_query(
        self,
        q: torch.Tensor,
        k: Optional[torch.Tensor],
        layer,
        forward_batch,
        save_kv_cache: bool,
        q_rope: Optional[torch.Tensor],
        k_rope: Optional[torch.Tensor],
    ) -> torch.Tensor:
        """Write this step's KV rows and return the [tokens, H, D] query."""
        if self.data_type == torch.float8_e4m3fn:
            q, k, k_rope = mla_quantize_without_rope_for_fp8(
                q, q_rope, k.squeeze(1), k_rope.squeeze(1)
            )
            if save_kv_cache:
                self.token_to_kv_pool.set_mla_kv_buffer(
                    layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
                )
            return q.view(-1, layer.tp_q_head_num, layer.head_dim)
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        q_pe = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
        return concat_mla_absorb_q_general(q_nope, q_pe)

    def _paged_kv(self, layer) -> torch.Tensor:
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    def _decode_md(self, forward_batch):
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )

    def _rank_local_state(self, raw_out, lse, local_seq_lens, layer, bs: int):
        """Shape the DCP partial state and neutralise rows this rank owns no
        KV for, so the cross-rank merge ignores them."""
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse
