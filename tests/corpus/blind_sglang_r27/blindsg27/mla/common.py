"""Query / KV preparation shared by the kernel team's MLA backends (bf16 KV)."""

from __future__ import annotations

from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc


class DcpMLAMixin:
    """Helpers for subclasses of TRTLLMMLABackend (bf16 KV cache only)."""

    def _save_kv(self, layer, forward_batch, k, k_rope, save_kv_cache: bool) -> None:
        if save_kv_cache:
            assert k is not None and k_rope is not None
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )

    def _merge_query(self, q, q_rope, layer, llama_4_scaling=None) -> torch.Tensor:
        if q_rope is not None:
            q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            q_rope = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
            query = concat_mla_absorb_q_general(q_nope, q_rope)
        else:
            query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        if llama_4_scaling is not None:
            query = (query.to(self.q_data_type) * llama_4_scaling).to(self.data_type)
        return query

    def _prepare_decode_query(
        self, q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, llama_4_scaling=None
    ) -> torch.Tensor:
        self._save_kv(layer, forward_batch, k, k_rope, save_kv_cache)
        query = self._merge_query(q, q_rope, layer, llama_4_scaling)
        if query.dim() == 3:
            query = query.unsqueeze(1)
        return query

    def _prepare_spec_query(
        self, q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache, bs: int
    ) -> torch.Tensor:
        self._save_kv(layer, forward_batch, k, k_rope, save_kv_cache)
        query = self._merge_query(q, q_rope, layer).to(self.data_type)
        return query.view(bs, -1, layer.tp_q_head_num, layer.head_dim)

    def _kv_cache_view(self, layer) -> torch.Tensor:
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    def _decode_metadata(self, forward_batch):
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        planned_bs = getattr(metadata, "batch_size", None)
        if planned_bs is not None and planned_bs < forward_batch.batch_size:
            self.init_forward_metadata(forward_batch)
            metadata = forward_batch.decode_trtllm_mla_metadata
        return metadata

    def _finish_dcp(self, raw_out, lse, local_seq_lens, layer, bs: int, q_len: int = 1):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        q_indptr = (
            self.q_indptr_decode[: bs + 1]
            if q_len == 1
            else self._dense_q_indptr(bs, q_len)
        )
        fixup_zero_kv_rows(output, lse, local_seq_lens, q_indptr, q_len)
        return output.flatten(1), lse
