"""Query / KV-cache preparation shared by the fork's MLA backends."""

from __future__ import annotations

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class MlaQueryPrepMixin:
    """Mixed into subclasses of TRTLLMMLABackend (and cute-dsl MLA)."""

    def _prepare_decode_query(
        self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
    ):
        if save_kv_cache and k is not None and k_rope is not None:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if q_rope is not None:
            q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            q_rope = q_rope.view(
                -1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim
            )
            query = concat_mla_absorb_q_general(q_nope, q_rope)
        else:
            query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        if query.dim() == 3:
            query = query.unsqueeze(1)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        return query, kv_cache

    def _prepare_spec_query(
        self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
    ):
        if save_kv_cache and k is not None and k_rope is not None:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if q_rope is not None:
            q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            q_rope = q_rope.view(
                -1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim
            )
            q = concat_mla_absorb_q_general(q_nope, q_rope)
        q = q.view(-1, layer.tp_q_head_num, layer.head_dim).to(self.data_type)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        return q, kv_cache

    def _decode_metadata(self, forward_batch: ForwardBatch):
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        batch_size = getattr(metadata, "batch_size", None)
        if batch_size is not None and batch_size < forward_batch.batch_size:
            self.init_forward_metadata(forward_batch)
            metadata = forward_batch.decode_trtllm_mla_metadata
        return metadata

    def _finish_dcp_decode(self, raw_out, lse, local_seq_lens, layer, bs):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )
        return output.flatten(1), lse
