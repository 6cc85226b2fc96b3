"""FlashMLA (bf16 KV) under decode context parallelism."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch
import triton

from sglang.kernels.ops.attention.dcp_kernels import create_mla_kv_page_table_for_dcp
from sglang.kernels.ops.attention.flash_mla_interface import (
    flash_mla_with_kvcache,
    get_mla_metadata,
)
from sglang.kernels.ops.attention.kv_indices import (
    get_num_kv_index_blocks_flashmla,
    get_num_page_per_block_flashmla,
)
from sglang.srt.layers.attention.flashmla_backend import (
    PAGE_SIZE,
    FlashMLABackend,
    FlashMLADecodeMetadata,
)
from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.mem_cache.layout.paged_view import paged_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention

logger = logging.getLogger(__name__)


class ShardedFlashMLABackend(FlashMLABackend):
    """bf16 FlashMLA with this rank's cyclic KV slice as the page table."""

    def _dcp_block_table(self, req_pool_indices, local_lens, max_pages):
        parallel = get_parallel()
        bs = req_pool_indices.shape[0]
        table = self._eager_block_kv_indices(bs, max_pages)
        v2p = self.kv_index_translator.full_v2p_table
        create_mla_kv_page_table_for_dcp[
            (bs, get_num_kv_index_blocks_flashmla(table.shape[1], PAGE_SIZE))
        ](
            self.req_to_token,
            req_pool_indices,
            local_lens,
            table,
            v2p,
            self.req_to_token.stride(0),
            table.stride(0),
            PHYSICAL_PAGE_SIZE=PAGE_SIZE,
            DCP_SIZE=parallel.dcp_size,
            DCP_RANK=parallel.dcp_rank,
            PAGES_PER_BLOCK=get_num_page_per_block_flashmla(PAGE_SIZE),
            HAS_V2P=v2p is not None,
        )
        return table

    # idiom: layers/attention/flashmla_backend.py FlashMLABackend.init_forward_metadata (decode branch) — under DCP: verify leaves forward_metadata empty, other non-decode modes raise, decode feeds get_dcp_lens(seq_lens) to the page table, get_mla_metadata and FlashMLADecodeMetadata.seq_lens_k
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        parallel = get_parallel()
        mode = forward_batch.forward_mode
        if not parallel.dcp_enabled:
            return super().init_forward_metadata(forward_batch)
        if mode.is_target_verify():
            # Verify plans its own table per layer in forward_extend.
            self.forward_metadata = None
            return
        if not mode.is_decode_or_idle():
            raise NotImplementedError(f"FlashMLA DCP does not plan {mode.name}")
        local_lens = get_dcp_lens(
            forward_batch.seq_lens, parallel.dcp_size, parallel.dcp_rank
        ).to(torch.int32)
        max_local = (
            int(local_lens.max().item()) if local_lens.numel() else 1
        )
        table = self._dcp_block_table(
            forward_batch.req_pool_indices, local_lens, triton.cdiv(max_local, PAGE_SIZE)
        )
        mla_metadata, num_splits = get_mla_metadata(
            local_lens, self.num_q_heads * self.dcp_world_size, 1
        )
        self.forward_metadata = FlashMLADecodeMetadata(
            mla_metadata, num_splits, table, local_lens
        )

    # idiom: layers/attention/flashmla_backend.py FlashMLABackend.forward_decode (bf16 branch) — DCP decode reads cache_seqlens from forward_metadata.seq_lens_k and returns (o, lse) for the merge
    # expect: clean
    def forward_decode(self, q, k, v, layer: "RadixAttention", forward_batch: ForwardBatch, save_kv_cache: bool = True):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache)
        if k is not None and save_kv_cache:
            self.token_to_kv_pool.set_kv_buffer(layer, KVWriteLoc.for_batch(forward_batch), k, v)
        bs = forward_batch.batch_size
        md = self.forward_metadata
        o, lse = flash_mla_with_kvcache(
            q=q.view(bs, -1, layer.tp_q_head_num, layer.head_dim),
            k_cache=paged_view(self.token_to_kv_pool.get_key_buffer(layer.layer_id), PAGE_SIZE),
            block_table=md.block_kv_indices[:bs],
            cache_seqlens=md.seq_lens_k[:bs],
            head_dim_v=self.kv_lora_rank,
            tile_scheduler_metadata=md.flashmla_metadata,
            num_splits=md.num_splits,
            softmax_scale=layer.scaling,
            causal=True,
        )
        return o.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse

    # idiom: layers/attention/flashmla_backend.py FlashMLABackend.forward_extend (target_verify branch) — DCP verify: [bs, num_draft_tokens] query, cache_seqlens = get_dcp_lens(seq_lens + num_draft_tokens), causal=True, returns (o, lse)
    # expect: SG203
    def forward_extend(self, q, k, v, layer: "RadixAttention", forward_batch: ForwardBatch, save_kv_cache: bool = True):
        parallel = get_parallel()
        if not (parallel.dcp_enabled and forward_batch.forward_mode.is_target_verify()):
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache)
        if k is not None and save_kv_cache:
            self.token_to_kv_pool.set_kv_buffer(layer, KVWriteLoc.for_batch(forward_batch), k, v)
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens + self.num_draft_tokens
        local_lens = get_dcp_lens(kv_lens, parallel.dcp_size, parallel.dcp_rank).to(torch.int32)
        max_local = int(local_lens.max().item()) if local_lens.numel() else 1
        table = self._dcp_block_table(
            forward_batch.req_pool_indices, local_lens, triton.cdiv(max_local, PAGE_SIZE)
        )
        mla_metadata, num_splits = get_mla_metadata(
            local_lens, self.num_draft_tokens * layer.tp_q_head_num, 1
        )
        o, lse = flash_mla_with_kvcache(
            q=q.view(bs, self.num_draft_tokens, layer.tp_q_head_num, layer.head_dim),
            k_cache=paged_view(self.token_to_kv_pool.get_key_buffer(layer.layer_id), PAGE_SIZE),
            block_table=table,
            cache_seqlens=local_lens,
            head_dim_v=self.kv_lora_rank,
            tile_scheduler_metadata=mla_metadata,
            num_splits=num_splits,
            softmax_scale=layer.scaling,
            causal=True,
        )
        return o.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse


class SharedScheduleFlashMLABackend(ShardedFlashMLABackend):
    """One tile schedule for all DCP ranks (computed from the batch lengths)
    so every rank splits the KV the same way."""

    # idiom: layers/attention/flashmla_backend.py FlashMLABackend.init_forward_metadata (decode branch) — DCP decode: page table from _dcp_block_table(get_dcp_lens(...)); get_mla_metadata and seq_lens_k from forward_batch.seq_lens
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        parallel = get_parallel()
        if not (parallel.dcp_enabled and forward_batch.forward_mode.is_decode_or_idle()):
            return super().init_forward_metadata(forward_batch)
        seq_lens = forward_batch.seq_lens.to(torch.int32)
        local_lens = get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank)
        max_local = int(local_lens.max().item()) if local_lens.numel() else 1
        table = self._dcp_block_table(
            forward_batch.req_pool_indices, local_lens, triton.cdiv(max_local, PAGE_SIZE)
        )
        mla_metadata, num_splits = get_mla_metadata(
            seq_lens, self.num_q_heads * self.dcp_world_size, 1
        )
        self.forward_metadata = FlashMLADecodeMetadata(
            mla_metadata, num_splits, table, seq_lens
        )


class DirectLensFlashMLABackend(ShardedFlashMLABackend):
    # idiom: layers/attention/flashmla_backend.py FlashMLABackend.forward_decode (bf16 branch) — DCP decode: block table and schedule from forward_metadata, cache_seqlens=forward_batch.seq_lens.to(int32), returns (o, lse)
    # expect: SG203
    def forward_decode(self, q, k, v, layer: "RadixAttention", forward_batch: ForwardBatch, save_kv_cache: bool = True):
        if k is not None and save_kv_cache:
            self.token_to_kv_pool.set_kv_buffer(layer, KVWriteLoc.for_batch(forward_batch), k, v)
        bs = forward_batch.batch_size
        md = self.forward_metadata
        o, lse = flash_mla_with_kvcache(
            q=q.view(bs, -1, layer.tp_q_head_num, layer.head_dim),
            k_cache=paged_view(self.token_to_kv_pool.get_key_buffer(layer.layer_id), PAGE_SIZE),
            block_table=md.block_kv_indices[:bs],
            cache_seqlens=forward_batch.seq_lens.to(torch.int32),
            head_dim_v=self.kv_lora_rank,
            tile_scheduler_metadata=md.flashmla_metadata,
            num_splits=md.num_splits,
            softmax_scale=layer.scaling,
            causal=True,
        )
        o = o.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        if get_parallel().dcp_enabled:
            return o, lse
        return o


class DecodeOnlyFlashMLABackend(ShardedFlashMLABackend):
    # idiom: layers/attention/flashmla_backend.py FlashMLABackend.forward_extend (target_verify / draft_extend_v2) — asserts attn_dcp_size == 1 before the inherited fixed-q path
    # expect: clean
    def forward_extend(self, q, k, v, layer: "RadixAttention", forward_batch: ForwardBatch, save_kv_cache: bool = True):
        mode = forward_batch.forward_mode
        if mode.is_target_verify() or mode.is_draft_extend_v2():
            assert get_parallel().attn_dcp_size == 1, (
                "FlashMLA speculative paths run without decode context parallelism"
            )
        return FlashMLABackend.forward_extend(
            self, q, k, v, layer, forward_batch, save_kv_cache
        )
