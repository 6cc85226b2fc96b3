"""Wrapper attention backends (hybrid prefill/decode, two-batch overlap, DSA)
on the fork's DCP decode paths."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.dsa.dsa_dcp import (
    dcp_trtllm_sparse_attention,
    localize_dcp_page_table,
)
from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
from sglang.srt.layers.attention.hybrid_attn_backend import HybridAttnBackend
from sglang.srt.layers.attention.tbo_backend import TboAttnBackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg43.common.dcp_lens import to_local, verify_global_lens

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention


class ForkHybridAttnBackend(HybridAttnBackend):
    """Hybrid backend that can route target-verify to the decode MLA kernel."""

    def _decode_mla(self) -> TRTLLMMLABackend:
        backend = self.decode_backend
        if not isinstance(backend, TRTLLMMLABackend):
            raise NotImplementedError(
                f"verify-on-decode needs a trtllm_mla decode backend, got {type(backend)}"
            )
        return backend

    # expect: SG203
    def verify_with_decode_kernel(
        self, q: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ) -> torch.Tensor:
        assert forward_batch.forward_mode.is_target_verify() and self.spec_attn_is_decode
        backend = self._decode_mla()
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        global_lens = verify_global_lens(forward_batch.seq_lens[:bs], draft_token_num)
        seq_lens = to_local(global_lens)
        max_blocks = backend._calc_padded_blocks(backend.max_context_len)
        block_tables = backend._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            max_blocks,
            forward_batch.req_pool_indices,
            global_lens,
            global_lens.device,
        )
        k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, backend.page_size).unsqueeze(1)
        query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=backend.workspace_buffer,
            qk_nope_head_dim=backend.qk_nope_head_dim,
            kv_lora_rank=backend.kv_lora_rank,
            qk_rope_head_dim=backend.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens,
            max_seq_len=backend._get_dcp_local_max_seq_len(
                backend.max_context_len + draft_token_num
            ),
            bmm1_scale=backend._compute_decode_bmm1_scale(layer),
            return_lse=get_parallel().dcp_enabled,
        )
        return out

    # expect: clean
    def verify_with_decode_backend(
        self, q: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ) -> torch.Tensor:
        assert forward_batch.forward_mode.is_target_verify() and self.spec_attn_is_decode
        backend = self._decode_mla()
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        global_lens = verify_global_lens(forward_batch.seq_lens[:bs], draft_token_num)
        max_blocks = backend._calc_padded_blocks(backend.max_context_len)
        block_tables = backend._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            max_blocks,
            forward_batch.req_pool_indices,
            global_lens,
            global_lens.device,
        )
        k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, backend.page_size).unsqueeze(1)
        query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        return TRTLLMMLABackend._run_decode_kernel(
            backend,
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=to_local(global_lens),
            max_seq_len=backend._get_dcp_local_max_seq_len(
                backend.max_context_len + draft_token_num
            ),
            layer=layer,
        )


class ForkTboAttnBackend(TboAttnBackend):
    """TBO wrapper whose children are trtllm_mla backends."""

    def _check_children(self) -> None:
        for child in self.children:
            assert type(child) in (TRTLLMMLABackend, CuteDslMLABackend), type(child)

    # expect: SG203
    def plan_children_dcp(self, forward_batch: ForwardBatch) -> None:
        self._check_children()
        self.primary.init_forward_metadata(forward_batch=forward_batch)
        if forward_batch.tbo_children is None:
            return
        dcp = get_parallel().dcp_enabled
        for child, child_batch in zip(
            self.children, forward_batch.tbo_children, strict=True
        ):
            if child_batch.batch_size == 0:
                continue
            if dcp:
                child_batch = dataclasses.replace(
                    child_batch, seq_lens=to_local(child_batch.seq_lens)
                )
            child.init_forward_metadata(forward_batch=child_batch)

    # expect: clean
    def plan_children(self, forward_batch: ForwardBatch) -> None:
        self._check_children()
        self.primary.init_forward_metadata(forward_batch=forward_batch)
        if forward_batch.tbo_children is None:
            return
        for child, child_batch in zip(
            self.children, forward_batch.tbo_children, strict=True
        ):
            if child_batch.batch_size == 0:
                continue
            child.init_forward_metadata(forward_batch=child_batch)


class ForkDSABackend(DeepseekSparseAttnBackend):
    """DSA with the sparse trtllm decode call factored out."""

    def _sparse_kwargs(self, kv_cache, metadata, layer, sparse_mla_top_k: int) -> dict:
        return dict(
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            max_seq_len=metadata.max_seq_len_k,
            sparse_mla_top_k=sparse_mla_top_k,
            bmm1_scale=layer.scaling,
            backend="trtllm-gen",
        )

    # expect: SG203
    def sparse_decode_dcp(
        self,
        q_all: torch.Tensor,
        kv_cache: torch.Tensor,
        page_table_1: torch.Tensor,
        metadata,
        layer: "RadixAttention",
        topk_indices: Optional[torch.Tensor],
    ):
        sparse_mla_top_k = page_table_1.shape[-1]
        if self.dcp_size > 1:
            page_table_1, _local_counts = localize_dcp_page_table(
                self._dcp_page_table_cache,
                metadata=metadata,
                layer_id=layer.layer_id,
                topk_indices=topk_indices,
                page_table=page_table_1,
                dcp_size=self.dcp_size,
                dcp_rank=self.dcp_rank,
            )
        batch_size, num_heads, head_dim = q_all.shape
        q = q_all.view(batch_size, 1, num_heads, head_dim)
        kwargs = self._sparse_kwargs(kv_cache, metadata, layer, sparse_mla_top_k)
        seq_lens = metadata.cache_seqlens_int32[:batch_size]
        if self.dcp_size > 1:
            return dcp_trtllm_sparse_attention(
                query=q,
                block_tables=page_table_1.unsqueeze(1),
                seq_lens=seq_lens,
                cu_seqlens_q=self.get_device_int32_arange(batch_size + 1),
                **kwargs,
            )
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q, block_tables=page_table_1.unsqueeze(1), seq_lens=seq_lens, **kwargs
        )

    # expect: clean
    def sparse_decode_dcp_paged(
        self,
        q_all: torch.Tensor,
        kv_cache: torch.Tensor,
        page_table_1: torch.Tensor,
        metadata,
        layer: "RadixAttention",
        topk_indices: Optional[torch.Tensor],
    ):
        sparse_mla_top_k = page_table_1.shape[-1]
        batch_size, num_heads, head_dim = q_all.shape
        q = q_all.view(batch_size, 1, num_heads, head_dim)
        kwargs = self._sparse_kwargs(kv_cache, metadata, layer, sparse_mla_top_k)
        if self.dcp_size > 1:
            page_table_1, local_counts = localize_dcp_page_table(
                self._dcp_page_table_cache,
                metadata=metadata,
                layer_id=layer.layer_id,
                topk_indices=topk_indices,
                page_table=page_table_1,
                dcp_size=self.dcp_size,
                dcp_rank=self.dcp_rank,
            )
            return dcp_trtllm_sparse_attention(
                query=q,
                block_tables=page_table_1.unsqueeze(1),
                seq_lens=local_counts,
                cu_seqlens_q=self.get_device_int32_arange(batch_size + 1),
                **kwargs,
            )
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            block_tables=page_table_1.unsqueeze(1),
            seq_lens=metadata.cache_seqlens_int32[:batch_size],
            **kwargs,
        )

    # expect: clean
    def sparse_decode_draft(
        self,
        q_all: torch.Tensor,
        kv_cache: torch.Tensor,
        page_table_1: torch.Tensor,
        metadata,
        layer: "RadixAttention",
    ):
        """Draft-model sparse decode; the draft KV is replicated on every rank."""
        if self.dcp_size != 1:
            raise NotImplementedError(
                "sparse_decode_draft expects the replicated (dcp_size == 1) draft layout"
            )
        batch_size, num_heads, head_dim = q_all.shape
        kwargs = self._sparse_kwargs(kv_cache, metadata, layer, page_table_1.shape[-1])
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q_all.view(batch_size, 1, num_heads, head_dim),
            block_tables=page_table_1.unsqueeze(1),
            seq_lens=metadata.cache_seqlens_int32[:batch_size],
            **kwargs,
        )
