"""FlashMLA (flash_mla_with_kvcache / get_mla_metadata) under DCP."""

from __future__ import annotations

from typing import Optional

import torch
import triton

from sglang.kernels.ops.attention.flash_mla_interface import (
    flash_mla_with_kvcache,
    get_mla_metadata,
)
from sglang.kernels.ops.attention.kv_indices import (
    create_flashmla_kv_indices_triton,
    get_num_kv_index_blocks_flashmla,
)
from sglang.srt.distributed.parallel_state import get_dcp_rank, get_dcp_world_size
from sglang.srt.layers.attention.flashmla_backend import (
    PAGE_SIZE,
    FlashMLABackend,
    FlashMLADecodeMetadata,
)
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.mem_cache.layout.paged_view import paged_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from .lens import dcp_world_from_server_args, fill_dcp_page_table, local_lens_div


def _save_kv(backend: FlashMLABackend, layer, forward_batch, k, v, save_kv_cache):
    if k is not None and save_kv_cache:
        backend.token_to_kv_pool.set_kv_buffer(layer, KVWriteLoc.for_batch(forward_batch), k, v)


class LabFlashMLABackend(FlashMLABackend):
    """bf16 FlashMLA decode returning the rank-local LSE for the DCP merge."""

    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend.forward_decode
    # expect: SG203
    def forward_decode(self, q, k, v, layer: RadixAttention, forward_batch: ForwardBatch,
                       save_kv_cache: bool = True):
        _save_kv(self, layer, forward_batch, k, v, save_kv_cache)
        bs = forward_batch.batch_size
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        reshape_q = q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        o, lse = flash_mla_with_kvcache(
            q=reshape_q,
            k_cache=paged_view(k_cache, PAGE_SIZE),
            block_table=self.forward_metadata.block_kv_indices[:bs],
            cache_seqlens=forward_batch.seq_lens.to(torch.int32),
            head_dim_v=self.kv_lora_rank,
            tile_scheduler_metadata=self.forward_metadata.flashmla_metadata,
            num_splits=self.forward_metadata.num_splits,
            softmax_scale=layer.scaling,
            causal=True,
        )
        o = o.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        if get_parallel().dcp_enabled:
            return o, lse
        return o


class LabFlashMLABackendB(FlashMLABackend):
    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend.forward_decode
    # expect: clean
    def forward_decode(self, q, k, v, layer: RadixAttention, forward_batch: ForwardBatch,
                       save_kv_cache: bool = True):
        assert self.dcp_world_size == 1, (
            "LabFlashMLABackendB hands forward_batch.seq_lens to the kernel; "
            "it does not support decode context parallelism"
        )
        _save_kv(self, layer, forward_batch, k, v, save_kv_cache)
        bs = forward_batch.batch_size
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        reshape_q = q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        o, _ = flash_mla_with_kvcache(
            q=reshape_q,
            k_cache=paged_view(k_cache, PAGE_SIZE),
            block_table=self.forward_metadata.block_kv_indices[:bs],
            cache_seqlens=forward_batch.seq_lens.to(torch.int32),
            head_dim_v=self.kv_lora_rank,
            tile_scheduler_metadata=self.forward_metadata.flashmla_metadata,
            num_splits=self.forward_metadata.num_splits,
            softmax_scale=layer.scaling,
            causal=True,
        )
        return o.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class LabFlashMLADcpBackend(FlashMLABackend):
    """DCP-aware FlashMLA decode: metadata init localizes, decode reads it."""

    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend.init_forward_metadata (decode branch)
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        p = get_parallel()
        seq_lens = forward_batch.seq_lens
        eager_max_k = (
            forward_batch.seq_lens_cpu.max().item()
            if forward_batch.seq_lens_cpu is not None
            else self.max_context_len
        )
        max_seqlen_pad = triton.cdiv(eager_max_k, PAGE_SIZE)
        block_kv_indices = self._eager_block_kv_indices(bs, max_seqlen_pad)
        if p.dcp_enabled:
            local = local_lens_div(seq_lens, p.dcp_size, p.dcp_rank).to(torch.int32)
            fill_dcp_page_table(self.req_to_token, forward_batch.req_pool_indices, local,
                                block_kv_indices, PAGE_SIZE)
        else:
            create_flashmla_kv_indices_triton[
                (bs, get_num_kv_index_blocks_flashmla(max_seqlen_pad, PAGE_SIZE))
            ](
                self.req_to_token,
                forward_batch.req_pool_indices,
                seq_lens,
                None,
                block_kv_indices,
                self.req_to_token.stride(0),
                block_kv_indices.stride(0),
            )
        mla_metadata, num_splits = get_mla_metadata(
            seq_lens.to(torch.int32),
            self.num_q_heads,
            1,
            is_fp8_kvcache=self.is_fp8_kvcache,
        )
        self.forward_metadata = FlashMLADecodeMetadata(
            mla_metadata, num_splits, block_kv_indices, seq_lens.to(torch.int32)
        )

    def forward_decode(self, q, k, v, layer: RadixAttention, forward_batch: ForwardBatch,
                       save_kv_cache: bool = True):
        _save_kv(self, layer, forward_batch, k, v, save_kv_cache)
        bs = forward_batch.batch_size
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        o, lse = flash_mla_with_kvcache(
            q=q.view(bs, -1, layer.tp_q_head_num, layer.head_dim),
            k_cache=paged_view(k_cache, PAGE_SIZE),
            block_table=self.forward_metadata.block_kv_indices[:bs],
            cache_seqlens=self.forward_metadata.seq_lens_k[:bs],
            head_dim_v=self.kv_lora_rank,
            tile_scheduler_metadata=self.forward_metadata.flashmla_metadata,
            num_splits=self.forward_metadata.num_splits,
            softmax_scale=layer.scaling,
            causal=True,
        )
        o = o.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        return (o, lse) if get_parallel().dcp_enabled else o


class LabFlashMLADcpBackendV2(LabFlashMLADcpBackend):
    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend.init_forward_metadata (decode branch)
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return FlashMLABackend.init_forward_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        p = get_parallel()
        seq_lens = forward_batch.seq_lens
        eager_max_k = (
            forward_batch.seq_lens_cpu.max().item()
            if forward_batch.seq_lens_cpu is not None
            else self.max_context_len
        )
        max_seqlen_pad = triton.cdiv(eager_max_k, PAGE_SIZE)
        block_kv_indices = self._eager_block_kv_indices(bs, max_seqlen_pad)
        if p.dcp_enabled:
            kernel_lens = local_lens_div(seq_lens, p.dcp_size, p.dcp_rank).to(torch.int32)
            fill_dcp_page_table(self.req_to_token, forward_batch.req_pool_indices, kernel_lens,
                                block_kv_indices, PAGE_SIZE)
        else:
            kernel_lens = seq_lens.to(torch.int32)
            create_flashmla_kv_indices_triton[
                (bs, get_num_kv_index_blocks_flashmla(max_seqlen_pad, PAGE_SIZE))
            ](
                self.req_to_token,
                forward_batch.req_pool_indices,
                seq_lens,
                None,
                block_kv_indices,
                self.req_to_token.stride(0),
                block_kv_indices.stride(0),
            )
        mla_metadata, num_splits = get_mla_metadata(
            kernel_lens,
            self.num_q_heads,
            1,
            is_fp8_kvcache=self.is_fp8_kvcache,
        )
        self.forward_metadata = FlashMLADecodeMetadata(
            mla_metadata, num_splits, block_kv_indices, kernel_lens
        )


# idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend.forward_extend (target_verify, fixed-q decode kernel)
# expect: SG203
def flashmla_target_verify_dcp(
    backend: FlashMLABackend,
    q: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
    block_kv_indices: torch.Tensor,
    *,
    num_draft_tokens: Optional[int] = None,
    return_lse: bool = True,
):
    dcp_size, dcp_rank = dcp_world_from_server_args()
    ndt = num_draft_tokens or backend.num_draft_tokens
    bs = forward_batch.batch_size
    glob = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
    local = get_dcp_lens(glob, dcp_size, dcp_rank).to(torch.int32)
    mla_metadata, num_splits = get_mla_metadata(
        local, ndt * backend.num_q_heads, 1, is_fp8_kvcache=backend.is_fp8_kvcache
    )
    k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    o, lse = flash_mla_with_kvcache(
        q=q.view(bs, ndt, layer.tp_q_head_num, layer.head_dim),
        k_cache=paged_view(k_cache, PAGE_SIZE),
        block_table=block_kv_indices[:bs],
        cache_seqlens=local,
        head_dim_v=backend.kv_lora_rank,
        tile_scheduler_metadata=mla_metadata,
        num_splits=num_splits,
        softmax_scale=layer.scaling,
        causal=True,
    )
    o = o.view(-1, layer.tp_q_head_num * layer.v_head_dim)
    return (o, lse) if (return_lse and dcp_size > 1) else o


# idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend.forward_extend (target_verify, fixed-q decode kernel)
# expect: clean
def flashmla_spec_decode_dcp(
    backend: FlashMLABackend,
    q: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
    block_kv_indices: torch.Tensor,
    *,
    q_len: int = 1,
    return_lse: bool = True,
):
    if get_parallel().dcp_enabled:
        dcp_size, dcp_rank = get_dcp_world_size(), get_dcp_rank()
    else:
        dcp_size, dcp_rank = 1, 0
    if dcp_size > 1 and q_len > 1:
        raise NotImplementedError(
            "flash_mla_with_kvcache takes no global causal bound; multi-token "
            "verify / draft-extend under DCP is not supported on FlashMLA"
        )
    bs = forward_batch.batch_size
    glob = (forward_batch.seq_lens[:bs] + (q_len - 1)).to(torch.int32)
    local = get_dcp_lens(glob, dcp_size, dcp_rank).to(torch.int32)
    mla_metadata, num_splits = get_mla_metadata(
        local, q_len * backend.num_q_heads, 1, is_fp8_kvcache=backend.is_fp8_kvcache
    )
    k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    o, lse = flash_mla_with_kvcache(
        q=q.view(bs, q_len, layer.tp_q_head_num, layer.head_dim),
        k_cache=paged_view(k_cache, PAGE_SIZE),
        block_table=block_kv_indices[:bs],
        cache_seqlens=local,
        head_dim_v=backend.kv_lora_rank,
        tile_scheduler_metadata=mla_metadata,
        num_splits=num_splits,
        softmax_scale=layer.scaling,
        causal=True,
    )
    o = o.view(-1, layer.tp_q_head_num * layer.v_head_dim)
    return (o, lse) if (return_lse and dcp_size > 1) else o
