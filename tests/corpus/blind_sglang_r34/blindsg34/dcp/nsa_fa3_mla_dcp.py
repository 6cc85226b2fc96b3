"""Vendor DCP ports of the FA3-style MLA decode (flash_attn_with_kvcache with
``qv``) and of the NSA/DSA sparse MLA decode (trtllm-gen sparse)."""

from __future__ import annotations

from typing import Optional

import torch
import triton

from sglang.kernels.ops.attention.dcp_kernels import create_mla_kv_page_table_for_dcp
from sglang.kernels.ops.attention.flash_attention import flash_attn_with_kvcache
from sglang.kernels.ops.attention.kv_indices import (
    get_num_kv_index_blocks_flashmla,
    get_num_page_per_block_flashmla,
)
from sglang.srt.environ import envs
from sglang.srt.layers.attention.dsa.dsa_dcp import (
    dcp_trtllm_sparse_attention,
    localize_dcp_page_table,
)
from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
from sglang.srt.layers.attention.flashattention_backend import FlashAttentionBackend
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.mem_cache.layout.paged_view import paged_view
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.runtime_context import get_parallel

from blindsg34.dcp.lens import local_max_seq_len, to_local
from blindsg34.dcp.metadata import Fa3DcpMetadata
from blindsg34.dcp.world import dcp_from_group


class VendorFA3MLADcpBackend(FlashAttentionBackend):
    """FA3 MLA decode with DCP: rank-local page table + rank-local lengths.
    FA3 has no global causal bound, so only single-token decode is served."""

    def __init__(self, model_runner: ModelRunner, skip_prefill: bool = False, **kwargs):
        super().__init__(model_runner, skip_prefill=skip_prefill, **kwargs)
        self.dcp_world_size = get_parallel().attn_dcp_size
        self.dcp_rank = get_parallel().attn_dcp_rank
        self.req_to_token = model_runner.req_to_token_pool.req_to_token
        self.dcp_metadata: Optional[Fa3DcpMetadata] = None

    def _local_page_table(
        self,
        forward_batch: ForwardBatch,
        local_lens: torch.Tensor,
        dcp_size: int,
        dcp_rank: int,
    ) -> torch.Tensor:
        bs = forward_batch.batch_size
        max_pages = triton.cdiv(self.max_context_len, self.page_size * dcp_size)
        table = torch.zeros((bs, max_pages), dtype=torch.int32, device=self.device)
        v2p = self.kv_index_translator.full_v2p_table
        create_mla_kv_page_table_for_dcp[
            (bs, get_num_kv_index_blocks_flashmla(max_pages, self.page_size))
        ](
            self.req_to_token,
            forward_batch.req_pool_indices,
            local_lens,
            table,
            v2p,
            self.req_to_token.stride(0),
            table.stride(0),
            PHYSICAL_PAGE_SIZE=self.page_size,
            DCP_SIZE=dcp_size,
            DCP_RANK=dcp_rank,
            PAGES_PER_BLOCK=get_num_page_per_block_flashmla(self.page_size),
            HAS_V2P=v2p is not None,
        )
        return table

    def forward_decode_dcp(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        """The launch: reads self.dcp_metadata as planned."""
        md = self.dcp_metadata
        kv = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        c_kv = kv[:, :, : layer.v_head_dim]
        k_rope = kv[:, :, layer.v_head_dim :]
        q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        q_rope = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
        o, lse, *_ = flash_attn_with_kvcache(
            q=q_rope,
            k_cache=paged_view(k_rope, self.page_size),
            v_cache=paged_view(c_kv, self.page_size),
            qv=q_nope,
            page_table=md.page_table,
            cache_seqlens=md.cache_seqlens_int32,
            cu_seqlens_q=md.cu_seqlens_q,
            cu_seqlens_k_new=None,
            max_seqlen_q=md.max_seq_len_q,
            softmax_scale=layer.scaling,
            causal=True,
            return_softmax_lse=True,
        )
        return o.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse

    # idiom: sglang/srt/layers/attention/flashattention_backend.py FlashAttentionBackend.init_forward_metadata (FlashAttentionMetadata.cache_seqlens_int32 / page_table)
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if self.dcp_world_size == 1:
            return super().init_forward_metadata(forward_batch)
        if not forward_batch.forward_mode.is_decode_or_idle():
            raise NotImplementedError(
                "vendor FA3 MLA under DCP serves single-token decode only"
            )
        bs = forward_batch.batch_size
        cache_seqlens = forward_batch.seq_lens.to(torch.int32)
        local_lens = to_local(cache_seqlens, self.dcp_world_size, self.dcp_rank)
        self.dcp_metadata = Fa3DcpMetadata(
            cache_seqlens_int32=cache_seqlens,
            cache_seqlens_global=cache_seqlens,
            page_table=self._local_page_table(
                forward_batch, local_lens, self.dcp_world_size, self.dcp_rank
            ),
            cu_seqlens_q=torch.arange(0, bs + 1, dtype=torch.int32, device=self.device),
            max_seq_len_q=1,
            max_seq_len_k=local_max_seq_len(
                self.max_context_len, self.dcp_world_size, self.dcp_rank
            ),
        )


class VendorFA3MLADcpBackendGroup(VendorFA3MLADcpBackend):
    # idiom: sglang/srt/layers/attention/flashattention_backend.py FlashAttentionBackend.init_forward_metadata (FlashAttentionMetadata.cache_seqlens_int32 / page_table)
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not get_parallel().dcp_enabled:
            return super().init_forward_metadata(forward_batch)
        if not forward_batch.forward_mode.is_decode_or_idle():
            raise NotImplementedError(
                "vendor FA3 MLA under DCP serves single-token decode only: "
                "flash_attn_with_kvcache takes no global causal bound"
            )
        dcp_size, dcp_rank = dcp_from_group()
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens.to(torch.int32)
        local_lens = to_local(global_lens, dcp_size, dcp_rank)
        self.dcp_metadata = Fa3DcpMetadata(
            cache_seqlens_int32=local_lens,
            cache_seqlens_global=global_lens,
            page_table=self._local_page_table(forward_batch, local_lens, dcp_size, dcp_rank),
            cu_seqlens_q=torch.arange(0, bs + 1, dtype=torch.int32, device=self.device),
            max_seq_len_q=1,
            max_seq_len_k=local_max_seq_len(self.max_context_len, dcp_size, dcp_rank),
        )


class VendorNSADcpBackend(DeepseekSparseAttnBackend):
    """Sparse (top-k) MLA decode rows under DCP."""

    def _sparse_attention_kwargs(self, layer: RadixAttention, kv_cache, metadata, sparse_mla_top_k, bs):
        k_scale = getattr(layer, "k_scale_float", None) or 1.0
        return dict(
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            max_seq_len=metadata.max_seq_len_k,
            sparse_mla_top_k=sparse_mla_top_k,
            bmm1_scale=k_scale * layer.scaling,
            backend="trtllm-gen",
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_for(bs),
        )

    # idiom: sglang/srt/layers/attention/dsa_backend.py DeepseekSparseAttnBackend._forward_trtllm (localize_dcp_page_table + dcp_trtllm_sparse_attention)
    # expect: SG203
    def _sparse_decode_dcp(
        self,
        q_all: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        metadata,
        topk_indices: torch.Tensor,
        page_table_1: torch.Tensor,
    ):
        assert self.dcp_size > 1
        page_table_1, sparse_mla_top_k = self._pad_trtllm_sparse_page_table(page_table_1)
        # Cached per fresh top-k; the counts are recomputed by the kernel.
        page_table_1, _counts = localize_dcp_page_table(
            self._dcp_page_table_cache,
            metadata=metadata,
            layer_id=layer.layer_id,
            topk_indices=topk_indices,
            page_table=page_table_1,
            dcp_size=self.dcp_size,
            dcp_rank=self.dcp_rank,
        )
        bs, num_heads, head_dim = q_all.shape
        seq_lens = metadata.cache_seqlens_int32[:bs]
        return dcp_trtllm_sparse_attention(
            query=q_all.view(bs, 1, num_heads, head_dim),
            block_tables=page_table_1.unsqueeze(1),
            seq_lens=seq_lens,
            cu_seqlens_q=self.get_device_int32_arange(bs + 1),
            **self._sparse_attention_kwargs(layer, kv_cache, metadata, sparse_mla_top_k, bs),
        )


class VendorNSADcpBackendCounts(VendorNSADcpBackend):
    # idiom: sglang/srt/layers/attention/dsa_backend.py DeepseekSparseAttnBackend._forward_trtllm (localize_dcp_page_table + dcp_trtllm_sparse_attention)
    # expect: clean
    def _sparse_decode_dcp(
        self,
        q_all: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        metadata,
        topk_indices: torch.Tensor,
        page_table_1: torch.Tensor,
    ):
        assert self.dcp_size > 1
        page_table_1, sparse_mla_top_k = self._pad_trtllm_sparse_page_table(page_table_1)
        page_table_1, local_counts = localize_dcp_page_table(
            self._dcp_page_table_cache,
            metadata=metadata,
            layer_id=layer.layer_id,
            topk_indices=topk_indices,
            page_table=page_table_1,
            dcp_size=self.dcp_size,
            dcp_rank=self.dcp_rank,
        )
        bs, num_heads, head_dim = q_all.shape
        return dcp_trtllm_sparse_attention(
            query=q_all.view(bs, 1, num_heads, head_dim),
            block_tables=page_table_1.unsqueeze(1),
            seq_lens=local_counts,
            cu_seqlens_q=self.get_device_int32_arange(bs + 1),
            **self._sparse_attention_kwargs(layer, kv_cache, metadata, sparse_mla_top_k, bs),
        )
